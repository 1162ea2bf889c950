#ifndef TRELLIS_TEXT_TOKENIZER_H_
#define TRELLIS_TEXT_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace trellis::text {

// Maps text to token ids and back. Implementations are immutable and
// thread-safe.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Never adds BOS or EOS. Added tokens written in the text (such as
  // "<|im_start|>") become their ids and are never split. Fails with
  // InvalidArgument naming what the vocabulary cannot represent.
  [[nodiscard]] virtual absl::StatusOr<std::vector<int32_t>> Encode(
      std::string_view text) const = 0;
  // Special tokens decode to nothing; everything else to its exact text.
  // Ids outside the vocabulary decode to U+FFFD.
  virtual std::string Decode(absl::Span<const int32_t> ids) const = 0;

  virtual int32_t vocab_size() const = 0;
  // Padding; the primary EOS where the model defines no pad token.
  virtual int32_t pad_id() const = 0;
  // Absent where the model has none (Qwen2).
  virtual std::optional<int32_t> bos_id() const = 0;
  // The primary EOS: the one appended to supervised targets. First of
  // eos_ids().
  int32_t eos_id() const { return eos_ids().front(); }
  // Every id that ends a response: sampling stops at any of them. Never
  // empty.
  virtual absl::Span<const int32_t> eos_ids() const = 0;
  bool IsEos(int32_t id) const;
};

// One token per byte of a fixed alphabet, after three specials:
// 0 = <pad>, 1 = <bos>, 2 = <eos>. The default alphabet is printable ASCII.
std::unique_ptr<Tokenizer> NewCharTokenizer(std::string alphabet = "");

}  // namespace trellis::text

#endif  // TRELLIS_TEXT_TOKENIZER_H_
