#include "model/device.h"

#include <torch/cuda.h>

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace trellis::model {

std::string Device::ToString() const { return is_cuda() ? absl::StrCat("cuda:", index) : "cpu"; }

Device RoleDevice(const v1::JobConfig& job, v1::Role role, Binding binding, int visible_cuda) {
  Device device;
  if (job.runtime().device() != v1::RuntimeConfig::CUDA || role == v1::VERIFIER) return device;
  device.kind = v1::RuntimeConfig::CUDA;
  const bool colocated = job.deployment().placement() == v1::DeploymentConfig::COLOCATED;
  if (binding == Binding::kEmbedded && !colocated && role == v1::ACTOR) {
    device.index = visible_cuda > 0 ? visible_cuda - 1 : 0;
  }
  return device;
}

std::vector<Device> RankDevices(const v1::JobConfig& job, v1::Role role, Binding binding,
                                int visible_cuda) {
  int k = 1;
  if (role == v1::ACTOR) k = job.deployment().actor().tensor_parallel();
  if (role == v1::REFERENCE) k = job.deployment().reference().tensor_parallel();
  k = std::max(k, 1);
  std::vector<Device> ranks(k, RoleDevice(job, role, binding, visible_cuda));
  if (k == 1 || !ranks[0].is_cuda() || binding != Binding::kServed || visible_cuda < k ||
      visible_cuda % k != 0) {
    return ranks;
  }
  for (int r = 0; r < k; ++r) ranks[r].index = r * (visible_cuda / k);
  return ranks;
}

int VisibleCudaDevices() {
  return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
}

Device RoleDevice(const v1::JobConfig& job, v1::Role role, Binding binding) {
  // A CPU job never asks for CUDA (which would start its driver).
  const bool cuda = job.runtime().device() == v1::RuntimeConfig::CUDA;
  return RoleDevice(job, role, binding, cuda ? VisibleCudaDevices() : 0);
}

std::vector<Device> RankDevices(const v1::JobConfig& job, v1::Role role, Binding binding) {
  const bool cuda = job.runtime().device() == v1::RuntimeConfig::CUDA;
  return RankDevices(job, role, binding, cuda ? VisibleCudaDevices() : 0);
}

absl::Status CheckDeviceVisible(const v1::JobConfig& job, int visible_cuda) {
  if (job.runtime().device() != v1::RuntimeConfig::CUDA || visible_cuda > 0) {
    return absl::OkStatus();
  }
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  return absl::FailedPreconditionError(
      absl::StrCat("runtime.device: cuda, but no CUDA device is visible to this process (",
                   visible == nullptr ? "CUDA_VISIBLE_DEVICES unset"
                                      : absl::StrCat("CUDA_VISIBLE_DEVICES=\"", visible, "\""),
                   "; torch::cuda::is_available() is false); set runtime.device: cpu, or run where "
                   "a GPU is visible"));
}

absl::Status CheckDeviceVisible(const v1::JobConfig& job) {
  if (job.runtime().device() != v1::RuntimeConfig::CUDA) return absl::OkStatus();
  return CheckDeviceVisible(job, VisibleCudaDevices());
}

}  // namespace trellis::model
