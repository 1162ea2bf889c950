#include "text/hf_tokenizer.h"

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "env/env.h"
#include "text/internal/added_tokens.h"
#include "text/internal/hf_tokenizer_base.h"
#include "text/internal/sentencepiece_tokenizer.h"
#include "text/internal/tokenizer_json.h"

namespace trellis::text {
namespace {

using json = nlohmann::json;
using internal::AddedToken;
using internal::HfTokenizerBase;
using internal::SpecialIds;

// A JSON file's object; an empty object when the file is absent.
absl::StatusOr<json> ReadOptionalJson(env::Env& env, const std::string& path) {
  if (!env.Exists(path)) return json::object();
  absl::StatusOr<std::string> text = env.ReadFile(path);
  if (!text.ok()) return text.status();
  json root = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  return root;
}

// added_tokens_decoder: {"32000": {"content": "<|im_start|>", "special": true}, ...}.
absl::StatusOr<std::vector<AddedToken>> ReadAddedTokensDecoder(const json& config,
                                                               const std::string& path) {
  std::vector<AddedToken> tokens;
  auto list = config.find("added_tokens_decoder");
  if (list == config.end() || list->is_null()) return tokens;
  if (!list->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": added_tokens_decoder: expected an object"));
  }
  for (const auto& [key, token] : list->items()) {
    int32_t id = 0;
    auto content = token.find("content");
    if (!absl::SimpleAtoi(key, &id) || id < 0 || content == token.end() || !content->is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": added_tokens_decoder[\"", key,
                                                     "\"]: expected an id with a string content"));
    }
    auto special = token.find("special");
    tokens.push_back({id, content->get<std::string>(), special != token.end() && *special == true});
  }
  return tokens;
}

// A token field of tokenizer_config.json ("<s>" or {"content": "<s>"}) as
// an id; nullopt when absent or null.
absl::StatusOr<std::optional<int32_t>> TokenId(const json& config, const char* field,
                                               const HfTokenizerBase& tokenizer,
                                               const std::string& path) {
  auto it = config.find(field);
  if (it == config.end() || it->is_null()) return std::nullopt;
  const json& content = it->is_object() ? it->value("content", json()) : *it;
  if (!content.is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", field,
                     ": expected a token as a string or {\"content\": ...}, found ", it->dump()));
  }
  std::optional<int32_t> id = tokenizer.IdOf(content.get<std::string>());
  if (!id) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", field, " ", content.dump(), " is not a token of the vocabulary"));
  }
  return id;
}

// generation_config.json's eos_token_id: one id or a list.
absl::StatusOr<std::vector<int32_t>> GenerationEos(const json& config, const std::string& path,
                                                   int32_t vocab_size) {
  auto it = config.find("eos_token_id");
  if (it == config.end() || it->is_null()) return std::vector<int32_t>{};
  const json list = it->is_array() ? *it : json::array({*it});
  std::vector<int32_t> ids;
  for (const json& id : list) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": eos_token_id: expected ids below the vocabulary size ", vocab_size,
                       ", found ", it->dump()));
    }
    ids.push_back(id.get<int32_t>());
  }
  return ids;
}

absl::Status SetSpecialIds(const std::string& dir, const json& config, const json& generation,
                           HfTokenizerBase& tokenizer) {
  const std::string config_path = absl::StrCat(dir, "/tokenizer_config.json");
  const std::string generation_path = absl::StrCat(dir, "/generation_config.json");
  const SpecialIds defaults = tokenizer.ModelSpecialIds();
  absl::StatusOr<std::optional<int32_t>> bos = TokenId(config, "bos_token", tokenizer, config_path);
  absl::StatusOr<std::optional<int32_t>> eos = TokenId(config, "eos_token", tokenizer, config_path);
  absl::StatusOr<std::optional<int32_t>> pad = TokenId(config, "pad_token", tokenizer, config_path);
  absl::StatusOr<std::vector<int32_t>> more_eos =
      GenerationEos(generation, generation_path, tokenizer.vocab_size());
  for (const absl::Status& s : {bos.status(), eos.status(), pad.status(), more_eos.status()}) {
    if (!s.ok()) return s;
  }
  SpecialIds ids;
  ids.bos = bos->has_value() ? *bos : defaults.bos;
  ids.pad = pad->has_value() ? *pad : defaults.pad;
  if (eos->has_value()) ids.eos.push_back(**eos);
  for (int32_t id : *more_eos) {
    if (!absl::c_linear_search(ids.eos, id)) ids.eos.push_back(id);
  }
  if (ids.eos.empty()) ids.eos = defaults.eos;
  if (ids.eos.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": no EOS token: ", config_path,
                                                   " has no eos_token and ", generation_path,
                                                   " no eos_token_id"));
  }
  tokenizer.set_special_ids(std::move(ids));
  return absl::OkStatus();
}

// Reads tokenizer file `path`; `config` is tokenizer_config.json (empty when
// absent), at `config_path`.
using FileLoader = absl::StatusOr<std::unique_ptr<HfTokenizerBase>> (*)(
    env::Env& env, const std::string& path, const json& config, const std::string& config_path);

absl::StatusOr<std::unique_ptr<HfTokenizerBase>> LoadTokenizerJson(env::Env& env,
                                                                   const std::string& path,
                                                                   const json& config,
                                                                   const std::string& config_path) {
  absl::StatusOr<std::string> text = env.ReadFile(path);
  if (!text.ok()) return text.status();
  return internal::ParseTokenizerJson(*text, path);
}

absl::StatusOr<std::unique_ptr<HfTokenizerBase>> LoadSentencePiece(env::Env& env,
                                                                   const std::string& path,
                                                                   const json& config,
                                                                   const std::string& config_path) {
  absl::StatusOr<std::vector<AddedToken>> added = ReadAddedTokensDecoder(config, config_path);
  if (!added.ok()) return added.status();
  return internal::NewSentencePieceTokenizer(path, *added);
}

struct TokenizerFile {
  const char* name;
  FileLoader load;
};
// The first present is read.
constexpr TokenizerFile kTokenizerFiles[] = {
    {"tokenizer.json", LoadTokenizerJson},
    {"tokenizer.model", LoadSentencePiece},
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizer(const std::string& dir) {
  env::Env& env = *env::Env::Default();
  const std::string config_path = absl::StrCat(dir, "/tokenizer_config.json");
  absl::StatusOr<json> config = ReadOptionalJson(env, config_path);
  if (!config.ok()) return config.status();
  absl::StatusOr<json> generation =
      ReadOptionalJson(env, absl::StrCat(dir, "/generation_config.json"));
  if (!generation.ok()) return generation.status();

  const TokenizerFile* file = nullptr;
  for (const TokenizerFile& f : kTokenizerFiles) {
    if (file == nullptr && env.Exists(absl::StrCat(dir, "/", f.name))) file = &f;
  }
  if (file == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        dir, ": no tokenizer file; read are (the first present): ",
        absl::StrJoin(kTokenizerFiles, ", ",
                      [](std::string* out, const TokenizerFile& f) { out->append(f.name); })));
  }
  absl::StatusOr<std::unique_ptr<HfTokenizerBase>> tokenizer =
      file->load(env, absl::StrCat(dir, "/", file->name), *config, config_path);
  if (!tokenizer.ok()) return tokenizer.status();
  absl::Status status = SetSpecialIds(dir, *config, *generation, **tokenizer);
  if (!status.ok()) return status;
  return std::unique_ptr<Tokenizer>(*std::move(tokenizer));
}

}  // namespace trellis::text
