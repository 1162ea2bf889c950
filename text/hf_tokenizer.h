#ifndef TRELLIS_TEXT_HF_TOKENIZER_H_
#define TRELLIS_TEXT_HF_TOKENIZER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "text/tokenizer.h"

namespace trellis::text {

// The tokenizer of a Hugging Face model directory: tokenizer.json (byte-level
// BPE: GPT-2, Llama 3, Qwen2 and the like) when present, else
// tokenizer.model (SentencePiece: Llama 2, Mistral). Special ids come from
// tokenizer_config.json (bos_token, eos_token, pad_token, and the
// added_tokens_decoder of a SentencePiece model) and generation_config.json
// (eos_token_id, one id or a list: every one of them ends a response; the
// primary EOS is eos_token, else the first). Errors name the file and field;
// what is not supported is refused with the list of what is
// (docs/models.md).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizer(const std::string& dir);

}  // namespace trellis::text

#endif  // TRELLIS_TEXT_HF_TOKENIZER_H_
