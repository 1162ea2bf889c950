#include "text/internal/added_tokens.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace trellis::text::internal {

void AddedTokens::Add(AddedToken token) {
  if (const AddedToken* old = Find(token.id)) by_content_.erase(old->content);
  by_content_[token.content] = token.id;
  if (!token.content.empty()) starts_token_[static_cast<unsigned char>(token.content[0])] = true;
  by_id_[token.id] = std::move(token);
}

std::vector<Segment> AddedTokens::Split(absl::string_view text) const {
  std::vector<Segment> segments;
  size_t plain = 0;  // start of the plain text not yet in `segments`
  size_t i = 0;
  while (i < text.size()) {
    const AddedToken* longest = nullptr;
    if (!starts_token_[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    for (const auto& [id, token] : by_id_) {
      if (token.content.empty() || text.compare(i, token.content.size(), token.content) != 0) {
        continue;
      }
      if (longest == nullptr || token.content.size() > longest->content.size()) longest = &token;
    }
    if (longest == nullptr) {
      ++i;
      continue;
    }
    if (i > plain) segments.push_back({text.substr(plain, i - plain), -1});
    segments.push_back({text.substr(i, longest->content.size()), longest->id});
    i += longest->content.size();
    plain = i;
  }
  if (plain < text.size()) segments.push_back({text.substr(plain), -1});
  return segments;
}

const AddedToken* AddedTokens::Find(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &it->second;
}

int32_t AddedTokens::IdOf(absl::string_view content) const {
  auto it = by_content_.find(content);
  return it == by_content_.end() ? -1 : it->second;
}

std::vector<int32_t> AddedTokens::SpecialIds() const {
  std::vector<int32_t> ids;
  for (const auto& [id, token] : by_id_) {
    if (token.special) ids.push_back(id);
  }
  return ids;
}

int32_t AddedTokens::end_id() const {
  int32_t end = 0;
  for (const auto& [id, token] : by_id_) end = std::max(end, id + 1);
  return end;
}

}  // namespace trellis::text::internal
