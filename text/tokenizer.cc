#include "text/tokenizer.h"

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "text/internal/utf8.h"

namespace trellis::text {
namespace {

constexpr int32_t kPad = 0;
constexpr int32_t kBos = 1;
constexpr int32_t kEos = 2;
constexpr int32_t kNumSpecials = 3;
constexpr int32_t kEosIds[] = {kEos};

std::string DefaultAlphabet() {
  std::string alphabet;
  for (int c = 32; c <= 126; ++c) alphabet.push_back(static_cast<char>(c));
  return alphabet;
}

// Byte -> id lookup; -1 where the byte is not in the alphabet. A byte that
// appears twice in the alphabet keeps its first id.
class CharTokenizer final : public Tokenizer {
 public:
  explicit CharTokenizer(std::string alphabet) : alphabet_(std::move(alphabet)) {
    id_of_.fill(-1);
    for (size_t i = 0; i < alphabet_.size(); ++i) {
      const auto byte = static_cast<unsigned char>(alphabet_[i]);
      if (id_of_[byte] < 0) id_of_[byte] = kNumSpecials + static_cast<int32_t>(i);
    }
  }

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    ids.reserve(text.size());
    for (size_t i = 0; i < text.size(); ++i) {
      const auto byte = static_cast<unsigned char>(text[i]);
      const int32_t id = id_of_[byte];
      if (id < 0) {
        const std::string shown = (byte >= 32 && byte < 127)
                                      ? absl::StrCat("'", std::string(1, text[i]), "'")
                                      : absl::StrFormat("byte 0x%02x", byte);
        return absl::InvalidArgumentError(absl::StrCat(
            "CharTokenizer: character ", shown, " at offset ", i,
            " is not in the vocabulary"));
      }
      ids.push_back(id);
    }
    return ids;
  }

  std::string Decode(absl::Span<const int32_t> ids) const override {
    std::string text;
    text.reserve(ids.size());
    for (int32_t id : ids) {
      if (id == kPad || id == kBos || id == kEos) continue;
      const int64_t index = static_cast<int64_t>(id) - kNumSpecials;
      if (index < 0 || index >= static_cast<int64_t>(alphabet_.size())) {
        text.append(internal::kUtf8Replacement);
      } else {
        text.push_back(alphabet_[index]);
      }
    }
    return text;
  }

  int32_t vocab_size() const override {
    return kNumSpecials + static_cast<int32_t>(alphabet_.size());
  }
  int32_t pad_id() const override { return kPad; }
  std::optional<int32_t> bos_id() const override { return kBos; }
  absl::Span<const int32_t> eos_ids() const override { return kEosIds; }

 private:
  std::string alphabet_;
  std::array<int32_t, 256> id_of_;
};

}  // namespace

bool Tokenizer::IsEos(int32_t id) const { return absl::c_linear_search(eos_ids(), id); }

std::unique_ptr<Tokenizer> NewCharTokenizer(std::string alphabet) {
  if (alphabet.empty()) alphabet = DefaultAlphabet();
  return std::make_unique<CharTokenizer>(std::move(alphabet));
}

}  // namespace trellis::text
