// cuda_memory.h where LibTorch has no CUDA (CMake's TRELLIS_CUDA off).
#include "ledger/cuda_memory.h"

namespace trellis::ledger {
namespace {

absl::Status NoCuda() {
  return absl::UnimplementedError(
      "device memory: this build's LibTorch has no CUDA (TRELLIS_CUDA is off)");
}

}  // namespace

absl::StatusOr<std::unique_ptr<MemorySource>> CudaMemory(int index) { return NoCuda(); }

absl::StatusOr<std::vector<std::unique_ptr<MemorySource>>> CudaMemoryOfEveryDevice() {
  return NoCuda();
}

}  // namespace trellis::ledger
