#ifndef TRELLIS_TEXT_INTERNAL_TOKENIZER_JSON_H_
#define TRELLIS_TEXT_INTERNAL_TOKENIZER_JSON_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "text/internal/hf_tokenizer_base.h"

namespace trellis::text::internal {

// A byte-level BPE tokenizer from the text of a tokenizer.json (`path`
// names it in errors). Refuses, naming the field and what is supported,
// any model, normalizer, pre-tokenizer or decoder it does not implement.
absl::StatusOr<std::unique_ptr<HfTokenizerBase>> ParseTokenizerJson(absl::string_view text,
                                                                    const std::string& path);

}  // namespace trellis::text::internal

#endif  // TRELLIS_TEXT_INTERNAL_TOKENIZER_JSON_H_
