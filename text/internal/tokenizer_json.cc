#include "text/internal/tokenizer_json.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "text/internal/added_tokens.h"
#include "text/internal/bpe.h"
#include "text/internal/regex.h"

namespace trellis::text::internal {
namespace {

using json = nlohmann::json;

// An error at field `where` of the file.
class Fail {
 public:
  explicit Fail(std::string path) : path_(std::move(path)) {}
  absl::Status operator()(absl::string_view where, absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", where, ": ", message));
  }
  absl::Status Unsupported(absl::string_view where, const json& found,
                           absl::string_view supported) const {
    return (*this)(where, absl::StrCat(found.dump(), " is not supported; supported: ", supported));
  }

 private:
  std::string path_;
};

// object[key], or null when absent.
const json& Field(const json& object, const char* key) {
  static const json* null = new json();
  if (!object.is_object()) return *null;
  auto it = object.find(key);
  return it == object.end() ? *null : *it;
}

bool IsFalse(const json& v) { return v.is_null() || v == false; }
bool IsEmpty(const json& v) { return v.is_null() || v == ""; }

struct NormalizerName {
  const char* name;
  Normalizer normalizer;
};
constexpr NormalizerName kNormalizers[] = {{"NFC", Normalizer::kNfc}};

absl::Status ReadNormalizer(const json& v, const Fail& fail, ByteLevelBpeParts& parts) {
  if (v.is_null()) return absl::OkStatus();
  for (const NormalizerName& n : kNormalizers) {
    if (Field(v, "type") == n.name) {
      parts.normalizer = n.normalizer;
      return absl::OkStatus();
    }
  }
  return fail.Unsupported("normalizer", Field(v, "type"), "null, NFC");
}

constexpr char kSupportedPreTokenizers[] =
    "ByteLevel (add_prefix_space false), or a Sequence of Split (a Regex pattern, behavior "
    "Isolated, invert false) ending in ByteLevel";

// One Split or ByteLevel pre-tokenizer; `last` says whether it ends the chain.
using PreTokenizerReader = absl::Status (*)(const json& v, absl::string_view where, bool last,
                                            const Fail& fail, ByteLevelBpeParts& parts);

absl::Status ReadSplit(const json& v, absl::string_view where, bool last, const Fail& fail,
                       ByteLevelBpeParts& parts) {
  const json& pattern = Field(Field(v, "pattern"), "Regex");
  if (last || !pattern.is_string() || Field(v, "behavior") != "Isolated" ||
      !IsFalse(Field(v, "invert"))) {
    return fail.Unsupported(where, v, kSupportedPreTokenizers);
  }
  absl::StatusOr<Regex> regex = Regex::Compile(pattern.get<std::string>());
  if (!regex.ok()) return fail(absl::StrCat(where, ".pattern.Regex"), regex.status().message());
  parts.splits.push_back(*std::move(regex));
  return absl::OkStatus();
}

absl::Status ReadByteLevel(const json& v, absl::string_view where, bool last, const Fail& fail,
                           ByteLevelBpeParts& parts) {
  if (!last || !IsFalse(Field(v, "add_prefix_space"))) {
    return fail.Unsupported(where, v, kSupportedPreTokenizers);
  }
  if (Field(v, "use_regex") != false) parts.splits.push_back(*Regex::Compile(kGpt2SplitPattern));
  return absl::OkStatus();
}

struct PreTokenizerType {
  const char* name;
  PreTokenizerReader read;
};
constexpr PreTokenizerType kPreTokenizers[] = {{"Split", ReadSplit}, {"ByteLevel", ReadByteLevel}};

absl::Status ReadPreTokenizer(const json& v, const Fail& fail, ByteLevelBpeParts& parts) {
  const bool sequence = Field(v, "type") == "Sequence";
  const json& list = sequence ? Field(v, "pretokenizers") : json::array({v});
  if (!list.is_array() || list.empty())
    return fail.Unsupported("pre_tokenizer", v, kSupportedPreTokenizers);
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where =
        sequence ? absl::StrCat("pre_tokenizer.pretokenizers[", i, "]") : "pre_tokenizer";
    const PreTokenizerType* type = nullptr;
    for (const PreTokenizerType& t : kPreTokenizers) {
      if (Field(list[i], "type") == t.name) type = &t;
    }
    if (type == nullptr)
      return fail.Unsupported(where, Field(list[i], "type"), kSupportedPreTokenizers);
    absl::Status status = type->read(list[i], where, i + 1 == list.size(), fail, parts);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

// A merge as "left right" (tokenizers before 0.20) or ["left", "right"].
std::optional<std::pair<std::string, std::string>> MergePair(const json& merge) {
  if (merge.is_string()) {
    std::vector<std::string> halves = absl::StrSplit(merge.get<std::string>(), ' ');
    if (halves.size() != 2) return std::nullopt;
    return std::make_pair(halves[0], halves[1]);
  }
  if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
    return std::make_pair(merge[0].get<std::string>(), merge[1].get<std::string>());
  }
  return std::nullopt;
}

absl::Status ReadModel(const json& m, const Fail& fail, BpeModel& model) {
  if (Field(m, "type") != "BPE") return fail.Unsupported("model.type", Field(m, "type"), "BPE");
  if (!Field(m, "dropout").is_null())
    return fail.Unsupported("model.dropout", Field(m, "dropout"), "null");
  if (!IsEmpty(Field(m, "continuing_subword_prefix")) || !IsEmpty(Field(m, "end_of_word_suffix"))) {
    return fail("model", "continuing_subword_prefix and end_of_word_suffix are not supported");
  }
  if (!IsFalse(Field(m, "byte_fallback"))) {
    return fail.Unsupported("model.byte_fallback", Field(m, "byte_fallback"), "false");
  }
  model.ignore_merges = Field(m, "ignore_merges") == true;
  const json& vocab = Field(m, "vocab");
  if (!vocab.is_object()) return fail("model.vocab", "expected an object of piece: id");
  for (const auto& [piece, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      return fail(absl::StrCat("model.vocab[\"", piece, "\"]"), "expected an id in int32");
    }
    model.vocab[piece] = id.get<int32_t>();
  }
  const json& merges = Field(m, "merges");
  if (!merges.is_array()) return fail("model.merges", "expected a list");
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string where = absl::StrCat("model.merges[", rank, "]");
    std::optional<std::pair<std::string, std::string>> pair = MergePair(merges[rank]);
    if (!pair) return fail(where, "expected \"left right\" or [\"left\", \"right\"]");
    auto left = model.vocab.find(pair->first);
    auto right = model.vocab.find(pair->second);
    auto merged = model.vocab.find(pair->first + pair->second);
    if (left == model.vocab.end() || right == model.vocab.end() || merged == model.vocab.end()) {
      return fail(where, absl::StrCat(merges[rank].dump(), " names a piece not in model.vocab"));
    }
    model.merges.try_emplace({left->second, right->second}, static_cast<int32_t>(rank),
                             merged->second);
  }
  return absl::OkStatus();
}

absl::Status ReadAddedTokens(const json& list, const Fail& fail, AddedTokens& added) {
  if (list.is_null()) return absl::OkStatus();
  if (!list.is_array()) return fail("added_tokens", "expected a list");
  for (size_t i = 0; i < list.size(); ++i) {
    const json& t = list[i];
    const std::string where = absl::StrCat("added_tokens[", i, "]");
    const json& id = Field(t, "id");
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX ||
        !Field(t, "content").is_string()) {
      return fail(where, "expected an object with an id in int32 and a string content");
    }
    for (const char* flag : {"lstrip", "rstrip", "single_word"}) {
      if (!IsFalse(Field(t, flag)))
        return fail.Unsupported(absl::StrCat(where, ".", flag), true, "false");
    }
    added.Add(
        {id.get<int32_t>(), Field(t, "content").get<std::string>(), Field(t, "special") == true});
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<HfTokenizerBase>> ParseTokenizerJson(absl::string_view text,
                                                                    const std::string& path) {
  const Fail fail(path);
  const json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  ByteLevelBpeParts parts;
  absl::Status status = ReadNormalizer(Field(root, "normalizer"), fail, parts);
  if (status.ok()) status = ReadPreTokenizer(Field(root, "pre_tokenizer"), fail, parts);
  if (status.ok()) status = ReadModel(Field(root, "model"), fail, parts.model);
  if (status.ok() && Field(Field(root, "decoder"), "type") != "ByteLevel") {
    status = fail.Unsupported("decoder", Field(root, "decoder"), "ByteLevel");
  }
  if (status.ok()) status = ReadAddedTokens(Field(root, "added_tokens"), fail, parts.added);
  if (!status.ok()) return status;
  return NewByteLevelBpe(std::move(parts));
}

}  // namespace trellis::text::internal
