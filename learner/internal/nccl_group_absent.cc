// The NCCL group's calls in a build without NCCL (cmake/nccl.cmake): each
// fails, saying what is missing.
#include "absl/strings/str_cat.h"
#include "learner/internal/nccl_group.h"

namespace trellis::learner::internal {

absl::Status NcclGroupAvailable(const GroupOptions& options) {
  return absl::FailedPreconditionError(absl::StrCat(
      options.worker_id, ": learner group on ", options.device.str(),
      ": a CUDA learner's data-parallel group needs NCCL, and this build has none (CMake found "
      "no CUDA toolkit or NCCL, or TRELLIS_WITH_NCCL is OFF: cmake/nccl.cmake)"));
}

absl::StatusOr<std::unique_ptr<DataParallelGroup>> JoinNcclGroup(const GroupOptions& options,
                                                                 c10::intrusive_ptr<c10d::Store>) {
  return NcclGroupAvailable(options);
}

}  // namespace trellis::learner::internal
