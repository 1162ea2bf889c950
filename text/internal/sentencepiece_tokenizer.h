#ifndef TRELLIS_TEXT_INTERNAL_SENTENCEPIECE_TOKENIZER_H_
#define TRELLIS_TEXT_INTERNAL_SENTENCEPIECE_TOKENIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "text/internal/added_tokens.h"
#include "text/internal/hf_tokenizer_base.h"

namespace trellis::text::internal {

// A SentencePiece model file (tokenizer.model) with the added tokens of
// tokenizer_config.json. SentencePiece matches its user-defined pieces in
// the text itself; the other added tokens (its control symbols <s>, </s>,
// tokens beyond its vocabulary) are cut out first and the text between
// them encoded piece by piece.
absl::StatusOr<std::unique_ptr<HfTokenizerBase>> NewSentencePieceTokenizer(
    const std::string& path, const std::vector<AddedToken>& added);

}  // namespace trellis::text::internal

#endif  // TRELLIS_TEXT_INTERNAL_SENTENCEPIECE_TOKENIZER_H_
