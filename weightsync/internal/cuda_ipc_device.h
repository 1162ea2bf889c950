#ifndef TRELLIS_WEIGHTSYNC_INTERNAL_CUDA_IPC_DEVICE_H_
#define TRELLIS_WEIGHTSYNC_INTERNAL_CUDA_IPC_DEVICE_H_

// The CUDA side that both ends of the CUDA IPC transport share: which GPU
// a device index is. Built only with CUDA.

#include <cuda_runtime.h>

#include <cstring>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "cuda/cuda_memory.h"
#include "weightsync/internal/cuda_ipc_protocol.h"

namespace trellis::weightsync::internal::cuda_ipc {

// The UUID of CUDA device `device` (as this process numbers them, after
// CUDA_VISIBLE_DEVICES): FailedPrecondition when there is no such device.
inline absl::StatusOr<DeviceUuid> DeviceUuidOf(int device) {
  if (absl::Status s = cuda::CudaDeviceAvailable(); !s.ok()) return s;
  int count = 0;
  cudaGetDeviceCount(&count);
  if (device < 0 || device >= count) {
    return absl::FailedPreconditionError(absl::StrCat(
        kName, ": cuda_device ", device, " is not one of the ", count, " visible CUDA devices"));
  }
  cudaDeviceProp prop{};
  if (absl::Status s =
          cuda::CudaStatus(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
      !s.ok()) {
    return s;
  }
  DeviceUuid uuid;
  static_assert(sizeof(prop.uuid.bytes) == kUuidBytes);
  std::memcpy(uuid.data(), prop.uuid.bytes, kUuidBytes);
  return uuid;
}

}  // namespace trellis::weightsync::internal::cuda_ipc

#endif  // TRELLIS_WEIGHTSYNC_INTERNAL_CUDA_IPC_DEVICE_H_
