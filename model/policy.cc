#include "model/policy.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "env/env.h"
#include "model/hf_model.h"
#include "model/safetensors.h"

namespace trellis::model {
namespace {

// A Hugging Face directory's weights (a directory with config.json; model/
// hf_model.h), or one safetensors file of Trellis's names.
absl::StatusOr<NamedTensors> LoadInitialWeights(const std::string& path) {
  if (!env::Env::Default()->Exists(absl::StrCat(path, "/config.json"))) {
    return LoadSafetensors(path);
  }
  absl::StatusOr<HfModel> hf = LoadHfModel(path);
  if (!hf.ok()) return hf.status();
  return std::move(hf->weights);
}

}  // namespace

std::unique_lock<std::recursive_mutex> LockInitialDraws() {
  static std::recursive_mutex* draws = new std::recursive_mutex();
  return std::unique_lock<std::recursive_mutex>(*draws);
}

absl::StatusOr<Transformer> NewPolicy(const trellis::v1::ModelConfig& config,
                                      const trellis::v1::LoraConfig& lora, int64_t vocab_size,
                                      uint64_t seed, Head head) {
  Transformer model{nullptr};
  try {
    const std::unique_lock<std::recursive_mutex> draws = LockInitialDraws();
    torch::manual_seed(seed);
    model = Transformer(config, vocab_size, head, lora);
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("building the model: ", e.what_without_backtrace()));
  }
  const bool from_init = !config.init_checkpoint().empty();
  const std::string& init = from_init ? config.init_checkpoint() : config.path();
  if (init.empty()) return model;
  const std::string field = from_init ? "model.init_checkpoint " : "model.path ";
  absl::StatusOr<NamedTensors> weights = LoadInitialWeights(init);
  if (!weights.ok()) {
    return absl::Status(weights.status().code(),
                        absl::StrCat(field, init, ": ", weights.status().message()));
  }
  if (absl::Status s = model->LoadBaseWeights(*weights); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(field, init, ": ", s.message()));
  }
  return model;
}

}  // namespace trellis::model
