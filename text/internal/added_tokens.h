#ifndef TRELLIS_TEXT_INTERNAL_ADDED_TOKENS_H_
#define TRELLIS_TEXT_INTERNAL_ADDED_TOKENS_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace trellis::text::internal {

// A token matched in the text before the model sees it, never split
// (tokenizer.json's added_tokens, tokenizer_config.json's
// added_tokens_decoder). Special ones decode to nothing.
struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
};

// One stretch of the text: an added token's id, or plain text (id -1).
struct Segment {
  absl::string_view text;
  int32_t id = -1;
};

class AddedTokens {
 public:
  // Replaces a token of the same id.
  void Add(AddedToken token);

  // `text` cut at the added tokens, the leftmost match first and the
  // longest of those starting there. Plain segments are never empty.
  std::vector<Segment> Split(absl::string_view text) const;

  // Null when `id` is no added token.
  const AddedToken* Find(int32_t id) const;
  // -1 when no added token has this content.
  int32_t IdOf(absl::string_view content) const;
  // The ids of the special ones.
  std::vector<int32_t> SpecialIds() const;
  // One past the largest id (0 when empty).
  int32_t end_id() const;

 private:
  absl::flat_hash_map<int32_t, AddedToken> by_id_;
  // Whether some token starts with the byte: other positions are skipped.
  std::array<bool, 256> starts_token_{};
  absl::flat_hash_map<std::string, int32_t> by_content_;
};

}  // namespace trellis::text::internal

#endif  // TRELLIS_TEXT_INTERNAL_ADDED_TOKENS_H_
