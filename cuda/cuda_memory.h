#ifndef TRELLIS_CUDA_CUDA_MEMORY_H_
#define TRELLIS_CUDA_CUDA_MEMORY_H_

// CUDA runtime status conversion, device discovery, events and device
// buffers that only grow, shared by the device links (nccl_pair.h, the CUDA
// IPC weight transport). Built only with CUDA.

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace trellis::cuda {

// Internal naming `what` and CUDA's message unless `e` is cudaSuccess.
inline absl::Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("cuda: ", what, ": ", cudaGetErrorString(e)));
}

// OK when CUDA reports a usable device; otherwise FailedPrecondition
// saying why (no device, no driver).
inline absl::Status CudaDeviceAvailable() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat("no usable CUDA device: cudaGetDeviceCount: ", cudaGetErrorString(e)));
  }
  if (count == 0) return absl::FailedPreconditionError("no CUDA device on this machine");
  return absl::OkStatus();
}

// OK when CUDA device `index` is visible; otherwise FailedPrecondition
// saying why (as CudaDeviceAvailable, or how many devices there are).
inline absl::Status CudaDeviceVisible(int index) {
  if (absl::Status s = CudaDeviceAvailable(); !s.ok()) return s;
  int count = 0;
  cudaGetDeviceCount(&count);
  if (index >= 0 && index < count) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("no CUDA device ", index, ": ", count, " are visible"));
}

// A CUDA event without timing (on the current device), destroyed with its
// last holder.
using CudaEvent = std::shared_ptr<std::remove_pointer_t<cudaEvent_t>>;

inline absl::StatusOr<CudaEvent> NewCudaEvent() {
  cudaEvent_t e = nullptr;
  if (absl::Status s = CudaStatus(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                                  "cudaEventCreateWithFlags");
      !s.ok()) {
    return s;
  }
  return CudaEvent(e, cudaEventDestroy);
}

// Device memory (cudaMalloc, on the current device) that only grows: its
// pointer changes only when Reserve must grow it.
class DeviceBytes {
 public:
  DeviceBytes() = default;
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  ~DeviceBytes() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  absl::Status Reserve(size_t n) {
    if (n <= size_) return absl::OkStatus();
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    size_ = 0;
    if (absl::Status s = CudaStatus(cudaMalloc(&ptr_, n), "cudaMalloc"); !s.ok()) {
      return s;
    }
    size_ = n;
    return absl::OkStatus();
  }
  void* data() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace trellis::cuda

#endif  // TRELLIS_CUDA_CUDA_MEMORY_H_
