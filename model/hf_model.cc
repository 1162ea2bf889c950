#include "model/hf_model.h"

#include <map>
#include <set>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "env/env.h"
#include "model/policy.h"

namespace trellis::model {
namespace {

using json = nlohmann::json;

constexpr char kSingleFile[] = "model.safetensors";
constexpr char kIndexFile[] = "model.safetensors.index.json";

// The shards of an index's weight_map, each with the tensors it holds.
absl::StatusOr<std::map<std::string, std::set<std::string>>> ReadIndex(
    const std::string& path) {
  absl::StatusOr<std::string> text = env::Env::Default()->ReadFile(path);
  if (!text.ok()) return text.status();
  const json index = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") ||
      !index["weight_map"].is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": expected a JSON object with a weight_map object"));
  }
  std::map<std::string, std::set<std::string>> shards;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string() || file.get<std::string>().empty() ||
        absl::StrContains(file.get<std::string>(), '/') || file == "." || file == "..") {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor '", name, "' maps to ", file.dump(), ", not a file name in ", path));
    }
    shards[file.get<std::string>()].insert(name);
  }
  return shards;
}

absl::StatusOr<NamedTensors> LoadSharded(const std::string& dir) {
  const std::string index_path = absl::StrCat(dir, "/", kIndexFile);
  absl::StatusOr<std::map<std::string, std::set<std::string>>> shards = ReadIndex(index_path);
  if (!shards.ok()) return shards.status();
  NamedTensors out;
  for (const auto& [file, names] : *shards) {
    absl::StatusOr<NamedTensors> tensors = LoadSafetensors(absl::StrCat(dir, "/", file));
    if (!tensors.ok()) {
      return absl::Status(tensors.status().code(),
                          absl::StrCat(index_path, ": shard ", file, " (holding '",
                                       *names.begin(), "'): ", tensors.status().message()));
    }
    std::set<std::string> found;
    for (auto& [name, tensor] : *tensors) {
      if (names.count(name) == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            index_path, ": shard ", file, " holds tensor '", name, "', which the index does not "
            "map to it"));
      }
      found.insert(name);
      out.emplace_back(std::move(name), std::move(tensor));
    }
    for (const std::string& name : names) {
      if (found.count(name) == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            index_path, ": tensor '", name, "' is mapped to shard ", file, ", which lacks it"));
      }
    }
  }
  return out;
}

// Tensors a checkpoint may hold that the Transformer does not: the rotary
// frequencies (computed from config.json) and a tied model's LM head.
bool Dropped(const std::string& name, const HfConfig& config) {
  return absl::EndsWith(name, ".rotary_emb.inv_freq") ||
         (config.model.tie_embeddings() && name == "lm_head.weight");
}

}  // namespace

absl::StatusOr<NamedTensors> LoadHfWeights(const std::string& dir) {
  env::Env* env = env::Env::Default();
  if (env->Exists(absl::StrCat(dir, "/", kSingleFile))) {
    return LoadSafetensors(absl::StrCat(dir, "/", kSingleFile));
  }
  if (env->Exists(absl::StrCat(dir, "/", kIndexFile))) return LoadSharded(dir);
  return absl::NotFoundError(absl::StrCat(dir, ": no ", kSingleFile, " or ", kIndexFile,
                                          " (weights are read from safetensors files only)"));
}

absl::StatusOr<HfModel> LoadHfModel(const std::string& dir) {
  HfModel model;
  model.dir = dir;
  absl::StatusOr<HfConfig> config = ReadHfConfig(dir);
  if (!config.ok()) return config.status();
  model.config = *std::move(config);
  absl::StatusOr<NamedTensors> weights = LoadHfWeights(dir);
  if (!weights.ok()) return weights.status();
  for (auto& [name, tensor] : *weights) {
    if (!Dropped(name, model.config)) model.weights.emplace_back(std::move(name), tensor);
  }
  return model;
}

absl::StatusOr<Transformer> NewHfTransformer(const HfModel& model) {
  Transformer transformer{nullptr};
  try {
    const std::unique_lock<std::recursive_mutex> draws = LockInitialDraws();
    transformer = Transformer(model.config.model, model.config.model.vocab_size());
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(model.dir, ": building the model: ", e.what_without_backtrace()));
  }
  if (absl::Status s = transformer->LoadWeights(model.weights); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(model.dir, ": ", s.message()));
  }
  return transformer;
}

}  // namespace trellis::model
