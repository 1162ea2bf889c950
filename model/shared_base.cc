#include "model/shared_base.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace trellis::model {
namespace {

bool SameLayout(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && a.dtype() == b.dtype() && a.device() == b.device();
}

}  // namespace

void SharedBase::Hold(const Transformer& model) {
  absl::MutexLock lock(&mu_);
  if (!tensors_.empty()) return;
  for (const auto& [name, tensor] : model->BaseWeights()) tensors_.emplace(name, tensor.detach());
}

absl::StatusOr<int64_t> SharedBase::Attach(Transformer& model) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<torch::Tensor, torch::Tensor>> pairs;
  for (const auto& item : model->named_parameters()) {
    const auto held = tensors_.find(item.key());
    if (held == tensors_.end() || !SameLayout(item.value(), held->second)) continue;
    if (!torch::equal(item.value(), held->second)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the shared LoRA base's ", item.key(),
          " differs from this model's: both must be built from the same runtime.seed and "
          "model.init_checkpoint or model.path"));
    }
    pairs.emplace_back(item.value(), held->second);
  }
  int64_t bytes = 0;
  for (auto& [param, base] : pairs) {
    param.set_data(base);
    bytes += static_cast<int64_t>(base.nbytes());
  }
  return bytes;
}

bool SharedBase::IsBase(const NamedTensors& weights) const {
  absl::MutexLock lock(&mu_);
  if (tensors_.empty() || weights.size() != tensors_.size()) return false;
  for (const auto& [name, tensor] : weights) {
    const auto held = tensors_.find(name);
    if (held == tensors_.end() || held->second.sizes() != tensor.sizes() ||
        held->second.dtype() != tensor.dtype() ||
        !torch::equal(held->second, tensor.to(held->second.device()))) {
      return false;
    }
  }
  return true;
}

}  // namespace trellis::model
