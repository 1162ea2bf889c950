#include "learner/internal/trainable.h"

#include <cmath>
#include <utility>

namespace trellis::learner::internal {

torch::Tensor MasterCopies::For(const torch::Tensor& model_param) {
  auto [it, inserted] = masters_.try_emplace(model_param.unsafeGetTensorImpl());
  if (inserted) {
    torch::NoGradGuard no_grad;
    it->second = model_param.detach()
                     .to(torch::kFloat32, /*non_blocking=*/false, /*copy=*/true)
                     .requires_grad_(model_param.requires_grad());
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

TrainableSet::TrainableSet(std::vector<torch::Tensor> model_params, MasterCopies* masters,
                           DataParallelGroup* group, bool shard, FlatShards* flat)
    : has_masters_(masters != nullptr), group_(group), flat_(flat) {
  for (torch::Tensor& p : model_params) {
    if (flat_ == nullptr || !flat_->Holds(p)) model_params_.push_back(std::move(p));
  }
  if (has_masters_) {
    for (const auto& p : model_params_) optimizer_params_.push_back(masters->For(p));
  } else {
    optimizer_params_ = model_params_;
  }
  if (!shard || group_ == nullptr || group_->size() == 1) {
    owned_params_ = optimizer_params_;
    return;
  }
  std::vector<int64_t> bytes;
  for (const auto& p : optimizer_params_) bytes.push_back(p.nbytes());
  owners_ = ShardByBytes(bytes, group_->size());
  for (size_t i = 0; i < optimizer_params_.size(); ++i) {
    if (owners_[i] == group_->rank()) owned_params_.push_back(optimizer_params_[i]);
  }
}

std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>> TrainableSet::DecayGroups()
    const {
  std::vector<torch::Tensor> decay, no_decay;
  for (const torch::Tensor& p : owned_params_) {
    if (p.requires_grad()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  }
  if (flat_ != nullptr) {
    for (torch::Tensor& t : flat_->decayed()) decay.push_back(std::move(t));
    for (torch::Tensor& t : flat_->plain()) no_decay.push_back(std::move(t));
  }
  return {std::move(decay), std::move(no_decay)};
}

void TrainableSet::ZeroGrad() {
  if (flat_ != nullptr) flat_->ZeroGrad();
  for (auto* set : {&model_params_, &optimizer_params_}) {
    for (auto& p : *set) {
      if (!p.grad().defined()) continue;
      p.mutable_grad().detach_();
      p.mutable_grad().zero_();
    }
  }
}

absl::StatusOr<double> TrainableSet::PrepareGradients(double max_norm) {
  torch::NoGradGuard no_grad;
  if (has_masters_) {
    for (size_t i = 0; i < model_params_.size(); ++i) {
      const torch::Tensor& g = model_params_[i].grad();
      optimizer_params_[i].mutable_grad() = g.defined() ? g.to(torch::kFloat32) : torch::Tensor();
      model_params_[i].mutable_grad() = torch::Tensor();
    }
  }
  if (group_ != nullptr && group_->size() > 1) {
    // A rank whose rows never reached a tensor adds zeros.
    std::vector<torch::Tensor> grads;
    for (auto& p : optimizer_params_) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      grads.push_back(p.grad());
    }
    if (absl::Status s = group_->AllReduceSum(grads); !s.ok()) return s;
  }
  if (flat_ == nullptr) return torch::nn::utils::clip_grad_norm_(optimizer_params_, max_norm);
  // The norm over every rank's flat shards and the whole tensors beside
  // them, scaled as clip_grad_norm_ does.
  std::vector<double> squares = {flat_->LocalGradSquares()};
  if (absl::Status s = group_->AllReduceSum(squares); !s.ok()) return s;
  const double norm = std::sqrt(squares[0] + GradSquares(optimizer_params_));
  const double factor = max_norm / (norm + 1e-6);
  if (factor < 1) {
    flat_->ScaleGradients(factor);
    for (const torch::Tensor& p : optimizer_params_) {
      if (p.grad().defined()) p.grad().mul_(factor);
    }
  }
  return norm;
}

absl::Status TrainableSet::AfterStep() {
  if (!owners_.empty()) {
    if (absl::Status s = group_->Broadcast(optimizer_params_, owners_); !s.ok()) return s;
  }
  if (has_masters_) {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < model_params_.size(); ++i) model_params_[i].copy_(optimizer_params_[i]);
  }
  return flat_ != nullptr ? flat_->AfterStep() : absl::OkStatus();
}

}  // namespace trellis::learner::internal
