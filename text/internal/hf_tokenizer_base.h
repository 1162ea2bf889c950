#ifndef TRELLIS_TEXT_INTERNAL_HF_TOKENIZER_BASE_H_
#define TRELLIS_TEXT_INTERNAL_HF_TOKENIZER_BASE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "text/internal/added_tokens.h"
#include "text/tokenizer.h"

namespace trellis::text::internal {

// The special ids a Hugging Face directory names (hf_tokenizer.cc reads
// them from tokenizer_config.json and generation_config.json).
struct SpecialIds {
  std::optional<int32_t> bos;
  std::vector<int32_t> eos;  // the primary first; never empty
  std::optional<int32_t> pad;
};

// What the Hugging Face tokenizers share around their model (byte-level
// BPE, SentencePiece): the added tokens, cut out of the text before the
// model encodes what lies between them, and the special ids.
class HfTokenizerBase : public Tokenizer {
 public:
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const final;
  // Drops special tokens, writes the other added tokens' content and hands
  // each run of the model's own ids to DecodePlain.
  std::string Decode(absl::Span<const int32_t> ids) const final;

  int32_t vocab_size() const final;
  int32_t pad_id() const final { return specials_.pad.value_or(eos_id()); }
  std::optional<int32_t> bos_id() const final { return specials_.bos; }
  absl::Span<const int32_t> eos_ids() const final { return specials_.eos; }

  // The id of a token written as `content`: an added token, else the
  // model's own piece; nullopt when neither has it.
  std::optional<int32_t> IdOf(absl::string_view content) const;
  void set_special_ids(SpecialIds ids) { specials_ = std::move(ids); }
  // The special ids the model file itself names, where the configuration
  // files name none (SentencePiece's <s>, </s>).
  virtual SpecialIds ModelSpecialIds() const { return {}; }
  // Marks an id (of the model's own vocabulary) special: Decode drops it.
  void MarkSpecial(int32_t id) { special_.insert(id); }

 protected:
  // `added` are the tokens cut out of the text before the model sees it.
  explicit HfTokenizerBase(AddedTokens added);

  const AddedTokens& added() const { return added_; }

  // Appends the ids of text holding no added token.
  [[nodiscard]] virtual absl::Status EncodePlain(absl::string_view text,
                                                 std::vector<int32_t>* ids) const = 0;
  // Appends the text of model ids (each within ModelSize()).
  virtual void DecodePlain(absl::Span<const int32_t> ids, std::string* text) const = 0;
  // The number of the model's own ids.
  virtual int32_t ModelSize() const = 0;
  virtual std::optional<int32_t> ModelIdOf(absl::string_view piece) const = 0;

 private:
  AddedTokens added_;
  absl::flat_hash_set<int32_t> special_;
  SpecialIds specials_;
};

}  // namespace trellis::text::internal

#endif  // TRELLIS_TEXT_INTERNAL_HF_TOKENIZER_BASE_H_
