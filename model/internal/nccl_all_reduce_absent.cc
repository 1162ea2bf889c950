// NewNcclAllReduce in a build without NCCL (cmake/nccl.cmake): fails,
// saying what is missing.
#include "absl/strings/str_cat.h"
#include "model/internal/nccl_all_reduce.h"

namespace trellis::model::internal {

absl::StatusOr<std::unique_ptr<RankAllReduce>> NewNcclAllReduce(
    const std::vector<torch::Device>& devices) {
  return absl::FailedPreconditionError(absl::StrCat(
      "tensor-parallel all-reduce across ", devices.size(),
      " CUDA devices: needs NCCL, and this build has none (CMake found no CUDA toolkit or NCCL, "
      "or TRELLIS_WITH_NCCL is OFF: cmake/nccl.cmake)"));
}

}  // namespace trellis::model::internal
