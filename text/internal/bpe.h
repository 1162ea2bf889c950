#ifndef TRELLIS_TEXT_INTERNAL_BPE_H_
#define TRELLIS_TEXT_INTERNAL_BPE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "text/internal/added_tokens.h"
#include "text/internal/hf_tokenizer_base.h"
#include "text/internal/regex.h"

namespace trellis::text::internal {

// A byte-level BPE vocabulary (tokenizer.json's model): pieces are spelled
// in the ByteLevel alphabet, one character per byte.
struct BpeModel {
  absl::flat_hash_map<std::string, int32_t> vocab;
  // (left id, right id) -> (rank, merged id); the lowest rank merges first.
  absl::flat_hash_map<std::pair<int32_t, int32_t>, std::pair<int32_t, int32_t>> merges;
  // A pre-token that is a whole piece is that piece, unmerged (Llama 3).
  bool ignore_merges = false;
};

enum class Normalizer { kNone, kNfc };

// What a byte-level BPE tokenizer is built from: the normalizer, the split
// patterns applied in order before the ByteLevel mapping, the model and
// the added tokens.
struct ByteLevelBpeParts {
  Normalizer normalizer = Normalizer::kNone;
  std::vector<Regex> splits;
  BpeModel model;
  AddedTokens added;
};

std::unique_ptr<HfTokenizerBase> NewByteLevelBpe(ByteLevelBpeParts parts);

// The GPT-2 pattern a ByteLevel pre-tokenizer splits with when use_regex.
extern const char kGpt2SplitPattern[];

}  // namespace trellis::text::internal

#endif  // TRELLIS_TEXT_INTERNAL_BPE_H_
