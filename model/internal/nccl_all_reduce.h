#ifndef TRELLIS_MODEL_INTERNAL_NCCL_ALL_REDUCE_H_
#define TRELLIS_MODEL_INTERNAL_NCCL_ALL_REDUCE_H_

// The all-reduce of a tensor-parallel group whose K ranks, threads of one
// process, are on K distinct CUDA devices (model/tensor_parallel.h): NCCL's,
// one non-blocking communicator per rank (cuda/nccl_pair.h), made at the
// first Begin and kept for every later forward. A rank's Sum queues
// ncclAllReduce behind the work on its device's current LibTorch stream and
// makes that stream wait for it, without waiting on the host. A forward that
// a rank aborted drops the communicators at its End (ncclCommAbort, which
// ends the collectives left waiting for the failed rank); the next Begin
// makes new ones. Compiled where CMake found NCCL (cmake/nccl.cmake);
// elsewhere nccl_all_reduce_absent.cc's NewNcclAllReduce fails, saying so.

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "model/internal/tensor_parallel_reduce.h"

namespace trellis::model::internal {

// The all-reduce of ranks on `devices`, rank r on devices[r].
// FailedPrecondition when this build has no NCCL or a device is not a
// visible CUDA device; InvalidArgument when two ranks share one.
[[nodiscard]] absl::StatusOr<std::unique_ptr<RankAllReduce>> NewNcclAllReduce(
    const std::vector<torch::Device>& devices);

}  // namespace trellis::model::internal

#endif  // TRELLIS_MODEL_INTERNAL_NCCL_ALL_REDUCE_H_
