#include "learner/internal/trainable.h"

#include <utility>

namespace trellis::learner::internal {

torch::Tensor MasterCopies::For(const torch::Tensor& model_param) {
  auto [it, inserted] = masters_.try_emplace(model_param.unsafeGetTensorImpl());
  if (inserted) {
    torch::NoGradGuard no_grad;
    it->second = model_param.detach().to(torch::kFloat32, /*non_blocking=*/false, /*copy=*/true);
  }
  return it->second;
}

void MasterCopies::Load(const torch::Tensor& model_param, const torch::Tensor& value) {
  torch::NoGradGuard no_grad;
  torch::Tensor master = For(model_param);
  master.copy_(value);
  model_param.copy_(master);
}

torch::Tensor MasterCopies::Find(const torch::Tensor& model_param) const {
  auto it = masters_.find(model_param.unsafeGetTensorImpl());
  return it == masters_.end() ? torch::Tensor() : it->second;
}

int64_t MasterCopies::bytes() const {
  int64_t total = 0;
  for (const auto& [key, master] : masters_) total += master.nbytes();
  return total;
}

TrainableSet::TrainableSet(std::vector<torch::Tensor> model_params, MasterCopies* masters)
    : model_params_(std::move(model_params)), has_masters_(masters != nullptr) {
  if (!has_masters_) {
    optimizer_params_ = model_params_;
    return;
  }
  for (const auto& p : model_params_) optimizer_params_.push_back(masters->For(p));
}

void TrainableSet::ZeroGrad() {
  for (auto* set : {&model_params_, &optimizer_params_}) {
    for (auto& p : *set) {
      if (!p.grad().defined()) continue;
      p.mutable_grad().detach_();
      p.mutable_grad().zero_();
    }
  }
}

double TrainableSet::PrepareGradients(double max_norm) {
  if (has_masters_) {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < model_params_.size(); ++i) {
      const torch::Tensor& g = model_params_[i].grad();
      optimizer_params_[i].mutable_grad() = g.defined() ? g.to(torch::kFloat32) : torch::Tensor();
      model_params_[i].mutable_grad() = torch::Tensor();
    }
  }
  return torch::nn::utils::clip_grad_norm_(optimizer_params_, max_norm);
}

void TrainableSet::AfterStep() {
  if (!has_masters_) return;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < model_params_.size(); ++i) model_params_[i].copy_(optimizer_params_[i]);
}

}  // namespace trellis::learner::internal
