#include "model/lora.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <string_view>

#include <torch/torch.h>

namespace trellis::model {

// kOverwritten builds the Linear with no output rows (its draws then touch
// no element), then gives W and b their shapes.
LoraLinearImpl::LoraLinearImpl(int64_t in, int64_t out, int64_t rank, double alpha, bool bias,
                               InitialValues init)
    : torch::nn::LinearImpl(
          torch::nn::LinearOptions(in, init == InitialValues::kDrawn ? out : 0).bias(bias)) {
  TORCH_CHECK(rank >= 0, "LoraLinear: rank must be >= 0, got ", rank);
  if (init == InitialValues::kOverwritten) {
    options.out_features(out);
    weight.set_data(torch::empty({out, in}));
    if (bias) this->bias.set_data(torch::empty({out}));
  }
  if (rank == 0) return;
  scale_ = alpha / static_cast<double>(rank);
  // Submodules hold the adapters so that they are named "lora_A.weight"; no
  // values are drawn here, which keeps W's draws those of a plain Linear.
  lora_A_ = register_module("lora_A", std::make_shared<torch::nn::Module>())
                ->register_parameter("weight", torch::zeros({rank, in}));
  lora_B_ = register_module("lora_B", std::make_shared<torch::nn::Module>())
                ->register_parameter("weight", torch::zeros({out, rank}));
}

torch::Tensor LoraLinearImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = torch::linear(x, weight, bias);
  if (!has_adapter()) return y;
  return y + torch::linear(torch::linear(x, lora_A_), lora_B_) * scale_;
}

void LoraLinearImpl::ResetAdapter() {
  if (!has_adapter()) return;
  torch::NoGradGuard no_grad;
  const double bound = 1.0 / std::sqrt(static_cast<double>(lora_A_.size(1)));
  lora_A_.uniform_(-bound, bound);
  lora_B_.zero_();
}

torch::Tensor LoraLinearImpl::MergedWeight() const {
  torch::NoGradGuard no_grad;
  if (!has_adapter()) return weight.detach();
  return weight + torch::matmul(lora_B_, lora_A_) * scale_;
}

bool IsAdapterName(std::string_view name) {
  for (std::string_view suffix : {".lora_A.weight", ".lora_B.weight"}) {
    if (name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix) {
      return true;
    }
  }
  return false;
}

std::vector<trellis::v1::LoraConfig::Projection> LoraTargets(const trellis::v1::LoraConfig& lora) {
  if (lora.target_modules().empty()) {
    return {trellis::v1::LoraConfig::Q_PROJ, trellis::v1::LoraConfig::V_PROJ};
  }
  std::vector<trellis::v1::LoraConfig::Projection> targets;
  for (int t : lora.target_modules()) {
    targets.push_back(static_cast<trellis::v1::LoraConfig::Projection>(t));
  }
  return targets;
}

bool IsLoraTarget(const trellis::v1::LoraConfig& lora,
                  trellis::v1::LoraConfig::Projection projection) {
  if (lora.rank() <= 0) return false;
  const std::vector<trellis::v1::LoraConfig::Projection> targets = LoraTargets(lora);
  return std::find(targets.begin(), targets.end(), projection) != targets.end();
}

}  // namespace trellis::model
