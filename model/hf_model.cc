#include "model/hf_model.h"

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "env/env.h"
#include "model/hf_experts.h"
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

using Readers = std::vector<std::unique_ptr<SafetensorsReader>>;

// The shards of DIR's index, each opened (its header read) and holding
// exactly the tensors the index maps to it.
absl::StatusOr<Readers> OpenSharded(const std::string& dir) {
  const std::string index_path = absl::StrCat(dir, "/", kIndexFile);
  absl::StatusOr<std::map<std::string, std::set<std::string>>> shards = ReadIndex(index_path);
  if (!shards.ok()) return shards.status();
  Readers readers;
  for (const auto& [file, names] : *shards) {
    absl::StatusOr<std::unique_ptr<SafetensorsReader>> reader =
        SafetensorsReader::Open(absl::StrCat(dir, "/", file));
    if (!reader.ok()) {
      return absl::Status(reader.status().code(),
                          absl::StrCat(index_path, ": shard ", file, " (holding '", *names.begin(),
                                       "'): ", reader.status().message()));
    }
    std::set<std::string> found;
    for (const SafetensorsReader::TensorInfo& info : (*reader)->tensors()) {
      if (names.count(info.name) == 0) {
        return absl::InvalidArgumentError(absl::StrCat(index_path, ": shard ", file,
                                                       " holds tensor '", info.name,
                                                       "', which the index does not map to it"));
      }
      found.insert(info.name);
    }
    for (const std::string& name : names) {
      if (found.count(name) == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            index_path, ": tensor '", name, "' is mapped to shard ", file, ", which lacks it"));
      }
    }
    readers.push_back(*std::move(reader));
  }
  return readers;
}

// DIR's weight files, opened: model.safetensors, else the index's shards.
absl::StatusOr<Readers> OpenWeights(const std::string& dir) {
  env::Env* env = env::Env::Default();
  if (env->Exists(absl::StrCat(dir, "/", kSingleFile))) {
    absl::StatusOr<std::unique_ptr<SafetensorsReader>> reader =
        SafetensorsReader::Open(absl::StrCat(dir, "/", kSingleFile));
    if (!reader.ok()) return reader.status();
    Readers readers;
    readers.push_back(*std::move(reader));
    return readers;
  }
  if (env->Exists(absl::StrCat(dir, "/", kIndexFile))) return OpenSharded(dir);
  return absl::NotFoundError(absl::StrCat(dir, ": no ", kSingleFile, " or ", kIndexFile,
                                          " (weights are read from safetensors files only)"));
}

// Tensors a checkpoint may hold that the Transformer does not: the rotary
// frequencies (computed from config.json) and a tied model's LM head.
bool Dropped(const std::string& name, const HfConfig& config) {
  return absl::EndsWith(name, ".rotary_emb.inv_freq") ||
         (config.model.tie_embeddings() && name == "lm_head.weight");
}

// The Transformer of `config`, built for its weights to be copied in
// (InitialValues::kOverwritten: nothing drawn), under LockInitialDraws
// (model/policy.h) as every build. Errors start with `dir`.
absl::StatusOr<Transformer> Build(const HfConfig& config, const std::string& dir) {
  try {
    const std::unique_lock<std::recursive_mutex> draws = LockInitialDraws();
    return Transformer(config.model, config.model.vocab_size(), Head::kLanguageModel,
                       trellis::v1::LoraConfig(), InitialValues::kOverwritten);
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": building the model: ", e.what_without_backtrace()));
  }
}

}  // namespace

absl::StatusOr<NamedTensors> LoadHfWeights(const std::string& dir,
                                           std::optional<torch::ScalarType> dtype) {
  absl::StatusOr<Readers> readers = OpenWeights(dir);
  if (!readers.ok()) return readers.status();
  NamedTensors out;
  for (const auto& reader : *readers) {
    for (const SafetensorsReader::TensorInfo& info : reader->tensors()) {
      absl::StatusOr<torch::Tensor> t = reader->Read(info, dtype);
      if (!t.ok()) return t.status();
      out.emplace_back(info.name, *std::move(t));
    }
  }
  return out;
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
  absl::StatusOr<Transformer> transformer = Build(model.config, model.dir);
  if (!transformer.ok()) return transformer.status();
  const NamedTensors params = (*transformer)->NamedWeights();
  HfWeightMap map(std::map<std::string, torch::Tensor>(params.begin(), params.end()));
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // (parameter, tensor)
  absl::Status s;
  for (const auto& [name, tensor] : model.weights) {
    absl::StatusOr<torch::Tensor> target = map.Target(name, tensor.sizes());
    if (!target.ok()) {
      s = target.status();
      break;
    }
    copies.emplace_back(*target, tensor);
  }
  if (s.ok()) s = map.CheckComplete();
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(model.dir, ": ", s.message()));
  torch::NoGradGuard no_grad;
  for (auto& [target, tensor] : copies) target.copy_(tensor);
  return transformer;
}

absl::Status FillFromHfDir(const std::string& dir, Transformer& model, HfLoadStats* stats) {
  env::Env* env = env::Env::Default();
  const double start = env->MonotonicSeconds();
  absl::StatusOr<HfConfig> config = ReadHfConfig(dir);
  if (!config.ok()) return config.status();
  absl::StatusOr<Readers> readers = OpenWeights(dir);
  if (!readers.ok()) return readers.status();
  std::map<std::string, torch::Tensor> params;
  for (auto& [name, param] : model->BaseWeights()) params.emplace(name, param);
  // A scalar head (a reward model or critic started from a language model)
  // keeps its own values; the directory's LM head has no place in it.
  const bool scalar = model->head() == Head::kScalar;
  if (scalar) params.erase("score.weight");
  HfWeightMap map(std::move(params));
  // Every name and shape is checked before a byte is copied.
  struct Copy {
    SafetensorsReader* reader;
    const SafetensorsReader::TensorInfo* info;
    torch::Tensor param;
  };
  std::vector<Copy> copies;
  HfLoadStats done;
  for (const auto& reader : *readers) {
    for (const SafetensorsReader::TensorInfo& info : reader->tensors()) {
      if (Dropped(info.name, *config) || (scalar && info.name == "lm_head.weight")) continue;
      absl::StatusOr<torch::Tensor> target = map.Target(info.name, info.shape);
      if (!target.ok()) {
        return absl::Status(target.status().code(),
                            absl::StrCat(reader->path(), ": ", target.status().message()));
      }
      copies.push_back({reader.get(), &info, *std::move(target)});
      done.file_bytes += static_cast<int64_t>(info.end - info.begin);
    }
  }
  if (absl::Status s = map.CheckComplete(); !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat(dir, ": ", s.message(), " (no weights file holds it)"));
  }
  for (const Copy& copy : copies) {
    if (absl::Status s = copy.reader->ReadInto(*copy.info, copy.param); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(dir, ": ", s.message()));
    }
    done.parameter_bytes += static_cast<int64_t>(copy.param.nbytes());
  }
  done.tensors = static_cast<int64_t>(copies.size());
  done.fill_seconds = env->MonotonicSeconds() - start;
  if (stats != nullptr) *stats = done;
  return absl::OkStatus();
}

absl::StatusOr<Transformer> LoadHfTransformer(const std::string& dir, const HfLoadOptions& options,
                                              HfLoadStats* stats) {
  env::Env* env = env::Env::Default();
  const double start = env->MonotonicSeconds();
  absl::StatusOr<HfConfig> config = ReadHfConfig(dir);
  if (!config.ok()) return config.status();
  const torch::ScalarType dtype = options.dtype.value_or(config->dtype);
  if (dtype != torch::kFloat32 && dtype != torch::kBFloat16 && dtype != torch::kFloat16) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": cannot load into ",
                                                   std::string(c10::toString(dtype)),
                                                   " (float32, bfloat16 or float16)"));
  }
  absl::StatusOr<Transformer> transformer = Build(*config, dir);
  if (!transformer.ok()) return transformer.status();
  if (dtype != torch::kFloat32) (*transformer)->SetParameterDtype(dtype);
  const double built = env->MonotonicSeconds();
  if (absl::Status s = FillFromHfDir(dir, *transformer, stats); !s.ok()) return s;
  if (stats != nullptr) stats->build_seconds = built - start;
  return transformer;
}

}  // namespace trellis::model
