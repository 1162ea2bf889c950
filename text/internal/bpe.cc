#include "text/internal/bpe.h"

#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "text/internal/utf8.h"

namespace trellis::text::internal {

const char kGpt2SplitPattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

std::string Utf8(uint32_t code_point) {
  std::string out;
  if (code_point < 0x80) {
    out.push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xE0 | (code_point >> 12)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
  return out;
}

// GPT-2's table: printable Latin-1 bytes stand for themselves, the others
// (controls, space, DEL, NBSP, soft hyphen) for 256, 257, ... in order.
struct ByteAlphabet {
  ByteAlphabet() {
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      const uint32_t code_point = printable ? b : next++;
      chars[b] = Utf8(code_point);
      byte_of[code_point] = static_cast<int16_t>(b);
    }
  }
  std::array<std::string, 256> chars;
  std::array<int16_t, 324> byte_of{};  // by code point; 256 + 68 remapped bytes
};

const ByteAlphabet& Alphabet() {
  static const ByteAlphabet* alphabet = new ByteAlphabet();
  return *alphabet;
}

absl::StatusOr<std::string> Nfc(absl::string_view text) {
  UErrorCode error = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(error);
  if (U_FAILURE(error)) return absl::InternalError(absl::StrCat("ICU NFC: ", u_errorName(error)));
  const icu::UnicodeString normalized =
      nfc->normalize(icu::UnicodeString::fromUTF8(
                         icu::StringPiece(text.data(), static_cast<int32_t>(text.size()))),
                     error);
  if (U_FAILURE(error))
    return absl::InvalidArgumentError(absl::StrCat("NFC: ", u_errorName(error)));
  std::string out;
  normalized.toUTF8String(out);
  return out;
}

class ByteLevelBpe final : public HfTokenizerBase {
 public:
  explicit ByteLevelBpe(ByteLevelBpeParts parts)
      : HfTokenizerBase(std::move(parts.added)),
        normalizer_(parts.normalizer),
        splits_(std::move(parts.splits)),
        model_(std::move(parts.model)) {
    int32_t size = 0;
    for (const auto& [piece, id] : model_.vocab) size = std::max(size, id + 1);
    bytes_.resize(size);
    for (const auto& [piece, id] : model_.vocab) bytes_[id] = Unspell(piece);
    for (int b = 0; b < 256; ++b) {
      auto it = model_.vocab.find(Alphabet().chars[b]);
      byte_id_[b] = it == model_.vocab.end() ? -1 : it->second;
    }
  }

 protected:
  absl::Status EncodePlain(absl::string_view text, std::vector<int32_t>* ids) const override {
    std::optional<std::string> normalized;
    if (normalizer_ == Normalizer::kNfc) {
      absl::StatusOr<std::string> nfc = Nfc(text);
      if (!nfc.ok()) return nfc.status();
      normalized = std::move(*nfc);
      text = *normalized;
    }
    std::vector<absl::string_view> pieces = {text};
    for (const Regex& split : splits_) {
      std::vector<absl::string_view> finer;
      for (absl::string_view piece : pieces) {
        absl::Status status = split.Split(piece, &finer);
        if (!status.ok()) return status;
      }
      pieces = std::move(finer);
    }
    for (absl::string_view piece : pieces) {
      absl::Status status = EncodeWord(piece, ids);
      if (!status.ok()) return status;
    }
    return absl::OkStatus();
  }

  void DecodePlain(absl::Span<const int32_t> ids, std::string* text) const override {
    for (int32_t id : ids) text->append(bytes_[id]);
  }

  int32_t ModelSize() const override { return static_cast<int32_t>(bytes_.size()); }

  std::optional<int32_t> ModelIdOf(absl::string_view piece) const override {
    auto it = model_.vocab.find(piece);
    if (it == model_.vocab.end()) return std::nullopt;
    return it->second;
  }

 private:
  // The bytes a piece spells; a character outside the ByteLevel alphabet
  // stands for itself.
  static std::string Unspell(absl::string_view piece) {
    std::string bytes;
    for (size_t i = 0; i < piece.size();) {
      const size_t next = NextCharStart(piece, i);
      const absl::string_view ch = piece.substr(i, next - i);
      const int byte = ByteOf(ch);
      if (byte >= 0) {
        bytes.push_back(static_cast<char>(byte));
      } else {
        bytes.append(ch.data(), ch.size());
      }
      i = next;
    }
    return bytes;
  }

  // The byte a ByteLevel character stands for; -1 for other characters.
  static int ByteOf(absl::string_view ch) {
    uint32_t code_point = 0;
    if (ch.size() == 1) {
      code_point = static_cast<unsigned char>(ch[0]);
    } else if (ch.size() == 2) {
      code_point = ((static_cast<unsigned char>(ch[0]) & 0x1F) << 6) |
                   (static_cast<unsigned char>(ch[1]) & 0x3F);
    } else {
      return -1;
    }
    if (code_point >= Alphabet().byte_of.size()) return -1;
    const int byte = Alphabet().byte_of[code_point];
    return Alphabet().chars[byte] == ch ? byte : -1;
  }

  // One pre-token: its bytes as ByteLevel characters, merged by rank.
  absl::Status EncodeWord(absl::string_view word, std::vector<int32_t>* ids) const {
    if (model_.ignore_merges) {
      std::string spelled;
      for (char c : word) spelled.append(Alphabet().chars[static_cast<unsigned char>(c)]);
      auto it = model_.vocab.find(spelled);
      if (it != model_.vocab.end()) {
        ids->push_back(it->second);
        return absl::OkStatus();
      }
    }
    std::vector<int32_t> symbols;
    symbols.reserve(word.size());
    for (char c : word) {
      const auto byte = static_cast<unsigned char>(c);
      if (byte_id_[byte] < 0) {
        return absl::InvalidArgumentError(
            absl::StrFormat("byte 0x%02x (ByteLevel character '%s') is not in the vocabulary", byte,
                            Alphabet().chars[byte]));
      }
      symbols.push_back(byte_id_[byte]);
    }
    while (symbols.size() > 1) {
      int32_t best_rank = std::numeric_limits<int32_t>::max();
      size_t best = 0;
      int32_t merged = -1;
      for (size_t i = 0; i + 1 < symbols.size(); ++i) {
        auto it = model_.merges.find({symbols[i], symbols[i + 1]});
        if (it != model_.merges.end() && it->second.first < best_rank) {
          best_rank = it->second.first;
          best = i;
          merged = it->second.second;
        }
      }
      if (merged < 0) break;
      symbols[best] = merged;
      symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    }
    ids->insert(ids->end(), symbols.begin(), symbols.end());
    return absl::OkStatus();
  }

  Normalizer normalizer_;
  std::vector<Regex> splits_;
  BpeModel model_;
  std::vector<std::string> bytes_;  // what each id decodes to
  std::array<int32_t, 256> byte_id_;
};

}  // namespace

std::unique_ptr<HfTokenizerBase> NewByteLevelBpe(ByteLevelBpeParts parts) {
  return std::make_unique<ByteLevelBpe>(std::move(parts));
}

}  // namespace trellis::text::internal
