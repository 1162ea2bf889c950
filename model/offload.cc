#include "model/offload.h"

#include <chrono>
#include <cstdlib>
#include <cstring>

namespace trellis::model {
namespace {

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A contiguous copy of CPU tensor `t` in memory LibTorch's CPU allocator
// never saw (so the ledger's tracker does not count it), freed with the
// copy's storage.
torch::Tensor UntrackedHostCopy(const torch::Tensor& t) {
  const torch::Tensor src = t.contiguous();
  constexpr size_t kAlign = 64;
  const size_t bytes = src.nbytes();
  void* data = std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  TORCH_CHECK(data != nullptr, "offload: no host memory for ", bytes, " bytes");
  std::memcpy(data, src.data_ptr(), bytes);
  return torch::from_blob(
      data, src.sizes(), [](void* p) { std::free(p); },
      torch::TensorOptions().dtype(src.scalar_type()));
}

// `t`'s values in host memory: pinned for a CUDA tensor, untracked for a
// CPU one.
torch::Tensor HostCopy(const torch::Tensor& t) {
  if (t.device().is_cpu()) return UntrackedHostCopy(t);
  torch::Tensor host =
      torch::empty(t.sizes(), torch::TensorOptions().dtype(t.scalar_type()).pinned_memory(true));
  host.copy_(t, /*non_blocking=*/false);
  return host;
}

}  // namespace

MoveResult HostOffload::MoveOut(const std::vector<torch::Tensor>& tensors) {
  const auto start = std::chrono::steady_clock::now();
  MoveResult result;
  for (const torch::Tensor& t : tensors) {
    if (!t.defined() || t.numel() == 0) continue;
    if (!held_.insert(t.unsafeGetTensorImpl()).second) continue;
    const c10::Device device = t.device();
    const torch::Tensor host = HostCopy(t);
    torch::NoGradGuard no_grad;
    t.set_data(host);
    entries_.push_back({t, device});
    result.tensors += 1;
    result.bytes += host.nbytes();
  }
  host_bytes_ += result.bytes;
  result.seconds = Since(start);
  return result;
}

MoveResult HostOffload::MoveIn() {
  const auto start = std::chrono::steady_clock::now();
  MoveResult result;
  torch::NoGradGuard no_grad;
  for (Entry& e : entries_) {
    const torch::Tensor& host = e.tensor;
    // A CPU tensor gets fresh storage from LibTorch's allocator (counted
    // again); a device tensor is copied back from pinned memory.
    torch::Tensor back = e.device.is_cpu() ? torch::empty(host.sizes(), host.options()).copy_(host)
                                           : host.to(e.device, /*non_blocking=*/false);
    result.tensors += 1;
    result.bytes += back.nbytes();
    e.tensor.set_data(back);
  }
  entries_.clear();
  held_.clear();
  host_bytes_ = 0;
  result.seconds = Since(start);
  return result;
}

}  // namespace trellis::model
