#ifndef TRELLIS_LEARNER_INTERNAL_NCCL_GROUP_H_
#define TRELLIS_LEARNER_INTERNAL_NCCL_GROUP_H_

// The learner's data-parallel group over NCCL, for ranks whose tensors live
// on a CUDA device (GroupOptions::device): one NCCL communicator of all the
// ranks, each on its device, its unique id passed through the rendezvous
// store DataParallelGroup::Join connected. Calls NCCL directly, as
// cuda/nccl_pair.h does, rather than through c10d's ProcessGroupNCCL, whose
// watchdog ends the process on a collective that times out: here every wait
// has the group's deadline and fails with a status. Each collective runs on
// the communicator's stream after the work queued on the device's current
// LibTorch stream, and returns once it has finished. Compiled where CMake
// found NCCL (cmake/nccl.cmake); elsewhere nccl_group_absent.cc's calls
// fail, saying so.

#include <memory>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "learner/internal/data_parallel.h"

namespace trellis::learner::internal {

// OK when this build has NCCL and options.device is a visible CUDA device;
// else FailedPrecondition naming what is missing.
[[nodiscard]] absl::Status NcclGroupAvailable(const GroupOptions& options);

// Joins the group over `store`: rank 0 draws NCCL's unique id and sets it
// in the store, the others read it; every rank connects within
// options.timeout. REQUIRES: NcclGroupAvailable(options) is OK, size > 1.
[[nodiscard]] absl::StatusOr<std::unique_ptr<DataParallelGroup>> JoinNcclGroup(
    const GroupOptions& options, c10::intrusive_ptr<c10d::Store> store);

}  // namespace trellis::learner::internal

#endif  // TRELLIS_LEARNER_INTERNAL_NCCL_GROUP_H_
