#include "model/policy.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "model/safetensors.h"

namespace trellis::model {

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
  const std::string& init = config.init_checkpoint();
  if (init.empty()) return model;
  absl::StatusOr<NamedTensors> weights = LoadSafetensors(init);
  if (!weights.ok()) return weights.status();
  if (absl::Status s = model->LoadBaseWeights(*weights); !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("model.init_checkpoint ", init, ": ", s.message()));
  }
  return model;
}

}  // namespace trellis::model
