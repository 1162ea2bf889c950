#include "model/policy.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "env/env.h"
#include "model/hf_model.h"
#include "model/safetensors.h"

namespace trellis::model {

std::unique_lock<std::recursive_mutex> LockInitialDraws() {
  static std::recursive_mutex* draws = new std::recursive_mutex();
  return std::unique_lock<std::recursive_mutex>(*draws);
}

absl::StatusOr<Transformer> NewPolicy(const trellis::v1::ModelConfig& config,
                                      const trellis::v1::LoraConfig& lora, int64_t vocab_size,
                                      uint64_t seed, Head head) {
  const bool from_init = !config.init_checkpoint().empty();
  const std::string& init = from_init ? config.init_checkpoint() : config.path();
  // A Hugging Face directory (one with config.json) is streamed into the
  // model (model/hf_model.h FillFromHfDir), so its base draws nothing; a
  // scalar head, which the directory lacks, draws its values.
  const bool hf_dir =
      !init.empty() && env::Env::Default()->Exists(absl::StrCat(init, "/config.json"));
  const bool overwritten = hf_dir && head == Head::kLanguageModel;
  Transformer model{nullptr};
  try {
    const std::unique_lock<std::recursive_mutex> draws = LockInitialDraws();
    torch::manual_seed(seed);
    model = Transformer(config, vocab_size, head, lora,
                        overwritten ? InitialValues::kOverwritten : InitialValues::kDrawn);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("building the model: ", e.what_without_backtrace()));
  }
  if (init.empty()) return model;
  absl::Status s;
  if (hf_dir) {
    s = FillFromHfDir(init, model);
  } else {
    absl::StatusOr<NamedTensors> weights = LoadSafetensors(init);
    s = weights.ok() ? model->LoadBaseWeights(*weights) : weights.status();
  }
  if (s.ok()) return model;
  return absl::Status(s.code(), absl::StrCat(from_init ? "model.init_checkpoint " : "model.path ",
                                             init, ": ", s.message()));
}

}  // namespace trellis::model
