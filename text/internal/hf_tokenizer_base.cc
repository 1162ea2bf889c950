#include "text/internal/hf_tokenizer_base.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "text/internal/utf8.h"

namespace trellis::text::internal {
HfTokenizerBase::HfTokenizerBase(AddedTokens added) : added_(std::move(added)) {
  for (int32_t id : added_.SpecialIds()) special_.insert(id);
}

absl::StatusOr<std::vector<int32_t>> HfTokenizerBase::Encode(std::string_view text) const {
  std::vector<int32_t> ids;
  for (const Segment& segment : added_.Split(absl::string_view(text.data(), text.size()))) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
      continue;
    }
    absl::Status status = EncodePlain(segment.text, &ids);
    if (!status.ok()) return status;
  }
  return ids;
}

std::string HfTokenizerBase::Decode(absl::Span<const int32_t> ids) const {
  std::string text;
  std::vector<int32_t> run;
  // Byte-level tokens may split a character: a run decodes to bytes that
  // are made valid UTF-8 as the Hugging Face decoder makes them.
  const auto flush = [&] {
    std::string bytes;
    DecodePlain(run, &bytes);
    AppendUtf8Lossy(bytes, &text);
    run.clear();
  };
  for (int32_t id : ids) {
    if (special_.contains(id)) continue;
    if (const AddedToken* token = added_.Find(id)) {
      flush();
      text.append(token->content);
    } else if (id < 0 || id >= ModelSize()) {
      flush();
      text.append(kUtf8Replacement);
    } else {
      run.push_back(id);
    }
  }
  flush();
  return text;
}

int32_t HfTokenizerBase::vocab_size() const { return std::max(ModelSize(), added_.end_id()); }

std::optional<int32_t> HfTokenizerBase::IdOf(absl::string_view content) const {
  const int32_t added = added_.IdOf(content);
  if (added >= 0) return added;
  return ModelIdOf(content);
}

}  // namespace trellis::text::internal
