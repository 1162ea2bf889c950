#ifndef TRELLIS_MODEL_TOKENIZER_H_
#define TRELLIS_MODEL_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace trellis::model {

// Maps text to token ids and back. Implementations are immutable and
// thread-safe.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Fails with InvalidArgument naming the first character (and its offset)
  // that the vocabulary lacks.
  [[nodiscard]] virtual absl::StatusOr<std::vector<int32_t>> Encode(
      std::string_view text) const = 0;
  // Special tokens (pad, bos, eos) decode to nothing; ids outside the
  // vocabulary decode to U+FFFD.
  virtual std::string Decode(absl::Span<const int32_t> ids) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual int32_t pad_id() const = 0;
  virtual int32_t bos_id() const = 0;
  // End of a response: sampling stops when it is produced.
  virtual int32_t eos_id() const = 0;
};

// One token per byte of a fixed alphabet, after three specials:
// 0 = <pad>, 1 = <bos>, 2 = <eos>. The default alphabet is printable ASCII.
std::unique_ptr<Tokenizer> NewCharTokenizer(std::string alphabet = "");

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_TOKENIZER_H_
