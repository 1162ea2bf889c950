#include "model/hf_export.h"

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "config/choice.h"
#include "env/env.h"
#include "model/export_dir.h"
#include "model/hf_experts.h"
#include "model/hf_config_writer.h"
#include "model/lora.h"
#include "model/safetensors.h"

namespace trellis::model {
namespace {

using json = nlohmann::json;

constexpr const char* kTokenizerFiles[] = {
    "tokenizer.json",      "tokenizer_config.json",
    "tokenizer.model",     "special_tokens_map.json",
    "chat_template.jinja", "vocab.json",
    "merges.txt",          "added_tokens.json",
};

// safetensors metadata transformers requires of a PyTorch checkpoint.
const std::map<std::string, std::string>& PtMetadata() {
  static const auto* metadata = new std::map<std::string, std::string>{{"format", "pt"}};
  return *metadata;
}

// `weights` as `dtype` on the CPU, without autograd history.
absl::StatusOr<NamedTensors> Converted(NamedTensors weights, c10::ScalarType dtype) {
  try {
    torch::NoGradGuard no_grad;
    for (auto& [name, tensor] : weights) {
      tensor = tensor.detach().to(torch::kCPU, dtype).contiguous();
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("converting the weights: ", e.what_without_backtrace()));
  }
  return weights;
}

// Writes `tensors` as `dtype` to the staged file `file`.
absl::Status SaveAs(const NamedTensors& tensors, c10::ScalarType dtype, absl::string_view file,
                    StagedDir& out) {
  absl::StatusOr<NamedTensors> converted = Converted(tensors, dtype);
  if (!converted.ok()) return out.Blame(file, converted.status());
  return out.Blame(file, SaveSafetensors(out.File(file), *converted, PtMetadata()));
}

// One shard's tensors and their bytes.
struct Shard {
  NamedTensors tensors;
  int64_t bytes = 0;
};

// Consecutive runs of `weights` of at most `max_bytes` each as `dtype` (a
// larger tensor alone), in order.
std::vector<Shard> SplitShards(NamedTensors weights, c10::ScalarType dtype, int64_t max_bytes) {
  std::vector<Shard> shards(1);
  for (auto& [name, tensor] : weights) {
    const int64_t bytes = tensor.numel() * static_cast<int64_t>(c10::elementSize(dtype));
    if (!shards.back().tensors.empty() && shards.back().bytes + bytes > max_bytes) {
      shards.emplace_back();
    }
    shards.back().bytes += bytes;
    shards.back().tensors.emplace_back(std::move(name), std::move(tensor));
  }
  return shards;
}

// The weights as `dtype`, converted one shard at a time (so that a
// conversion holds at most one shard's copy).
absl::Status WriteWeights(NamedTensors weights, c10::ScalarType dtype, int64_t max_shard_bytes,
                          StagedDir& out) {
  std::vector<Shard> shards = SplitShards(std::move(weights), dtype, max_shard_bytes);
  if (shards.size() == 1) return SaveAs(shards[0].tensors, dtype, "model.safetensors", out);
  json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", json::object()}};
  int64_t total = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file =
        absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, shards.size());
    for (const auto& [name, tensor] : shards[i].tensors) index["weight_map"][name] = file;
    total += shards[i].bytes;
    if (absl::Status s = SaveAs(shards[i].tensors, dtype, file, out); !s.ok()) return s;
    shards[i].tensors.clear();
  }
  index["metadata"]["total_size"] = total;
  return out.Write("model.safetensors.index.json", index.dump(2) + "\n");
}

// Copies the tokenizer files `from` holds; none is fine (a directory of
// weights alone), a missing `from` is not.
absl::Status CopyTokenizer(const std::string& from, StagedDir& out) {
  env::Env* env = env::Env::Default();
  if (!env->Exists(from)) {
    return absl::NotFoundError(absl::StrCat("tokenizer directory ", from, " does not exist"));
  }
  for (const char* file : kTokenizerFiles) {
    const std::string path = absl::StrCat(from, "/", file);
    if (!env->Exists(path)) continue;
    absl::StatusOr<std::string> contents = env->ReadFile(path);
    if (!contents.ok()) return contents.status();
    if (absl::Status s = out.Write(file, *contents); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// The projections `lora` adapts, by their module names ("q_proj").
std::set<std::string> TargetNames(const trellis::v1::LoraConfig& lora) {
  std::set<std::string> names;
  for (trellis::v1::LoraConfig::Projection p : LoraTargets(lora)) {
    names.insert(config::ChoiceName(p));
  }
  return names;
}

// The projection an adapter tensor belongs to ("q_proj" for
// "model.layers.0.self_attn.q_proj.lora_A.weight").
// REQUIRES: IsAdapterName(name) (".lora_A.weight" and ".lora_B.weight"
// have the same length).
std::string AdaptedProjection(const std::string& name) {
  const std::string module = name.substr(0, name.size() - std::string(".lora_A.weight").size());
  return module.substr(module.find_last_of('.') + 1);
}

// Checks that `model`'s adapters are those `lora` describes: every
// adapted projection a target, every target adapted, every adapter of
// rank lora.rank().
absl::Status CheckAdapters(const NamedTensors& adapters, const trellis::v1::LoraConfig& lora) {
  const std::set<std::string> targets = TargetNames(lora);
  std::set<std::string> adapted;
  for (const auto& [name, tensor] : adapters) {
    const std::string projection = AdaptedProjection(name);
    if (targets.count(projection) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("adapter '", name, "' is on ", projection,
                                                     ", which lora.target_modules lacks"));
    }
    const bool is_a = absl::EndsWith(name, ".lora_A.weight");
    if (tensor.dim() != 2 || tensor.size(is_a ? 0 : 1) != lora.rank()) {
      return absl::InvalidArgumentError(absl::StrCat("adapter '", name, "' has shape [",
                                                     absl::StrJoin(tensor.sizes(), ", "),
                                                     "], not of lora.rank ", lora.rank()));
    }
    adapted.insert(projection);
  }
  for (const std::string& target : targets) {
    if (adapted.count(target) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("lora.target_modules names ", target,
                                                     ", but the model has no adapter on it"));
    }
  }
  return absl::OkStatus();
}

json AdapterConfig(const trellis::v1::LoraConfig& lora, const PeftExportOptions& options) {
  const std::set<std::string> targets = TargetNames(lora);
  return {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"base_model_name_or_path", options.base_model_name_or_path},
      {"r", lora.rank()},
      {"lora_alpha", lora.alpha()},
      {"target_modules", targets},
      {"bias", "none"},
      {"lora_dropout", 0.0},
      {"fan_in_fan_out", false},
      {"inference_mode", true},
      {"init_lora_weights", true},
      {"use_rslora", false},
      {"use_dora", false},
      {"modules_to_save", nullptr},
      {"layers_to_transform", nullptr},
      {"layers_pattern", nullptr},
      {"rank_pattern", json::object()},
      {"alpha_pattern", json::object()},
      {"revision", nullptr},
  };
}

}  // namespace

HfExportOptions HfExportOptionsFor(const std::string& dir, const HfConfig& config) {
  HfExportOptions options;
  options.architecture = config.architecture;
  options.dtype = config.dtype;
  options.tokenizer_dir = dir;
  return options;
}

absl::Status ExportHfModel(const Transformer& model, const HfExportOptions& options,
                           const std::string& dir) {
  if (model->head() != Head::kLanguageModel) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": only a language model is exported, not one with a scalar head"));
  }
  if (options.max_shard_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": max_shard_bytes must be positive, got ", options.max_shard_bytes));
  }
  HfConfig config;
  config.architecture = options.architecture;
  config.dtype = options.dtype;
  config.model = model->config();
  config.model.set_vocab_size(static_cast<int32_t>(model->vocab_size()));
  absl::StatusOr<std::string> config_json = HfConfigJson(config, options.token_ids);
  if (!config_json.ok()) {
    return absl::Status(config_json.status().code(),
                        absl::StrCat(dir, ": ", config_json.status().message()));
  }
  absl::StatusOr<StagedDir> out = StagedDir::Begin(dir);
  if (!out.ok()) return out.status();
  if (absl::Status s = out->Write("config.json", *config_json); !s.ok()) return s;
  if (absl::Status s =
          out->Write("generation_config.json", HfGenerationConfigJson(options.token_ids));
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          WriteWeights(ReleasedExpertLayout(model->MergedWeights(), options.architecture),
                       options.dtype, options.max_shard_bytes, *out);
      !s.ok()) {
    return s;
  }
  if (!options.tokenizer_dir.empty()) {
    if (absl::Status s = CopyTokenizer(options.tokenizer_dir, *out); !s.ok()) return s;
  }
  return out->Commit();
}

absl::Status ExportPeftAdapters(const Transformer& model, const trellis::v1::LoraConfig& lora,
                                const PeftExportOptions& options, const std::string& dir) {
  if (lora.rank() <= 0 || !model->has_adapters()) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": no adapters to export (lora.rank ", lora.rank(), ", the model has ",
                     model->has_adapters() ? "adapters" : "none", ")"));
  }
  if (HfDtypeName(options.dtype).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": adapter dtype ",
                                                   std::string(c10::toString(options.dtype)),
                                                   " is not one of float32, bfloat16, float16"));
  }
  NamedTensors adapters = model->AdapterWeights();
  if (absl::Status s = CheckAdapters(adapters, lora); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(dir, ": ", s.message()));
  }
  for (auto& [name, tensor] : adapters) name = absl::StrCat("base_model.model.", name);
  absl::StatusOr<StagedDir> out = StagedDir::Begin(dir);
  if (!out.ok()) return out.status();
  if (absl::Status s =
          out->Write("adapter_config.json", AdapterConfig(lora, options).dump(2) + "\n");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = SaveAs(adapters, options.dtype, "adapter_model.safetensors", *out);
      !s.ok()) {
    return s;
  }
  return out->Commit();
}

}  // namespace trellis::model
