#ifndef TRELLIS_LEARNER_INTERNAL_DATA_PARALLEL_H_
#define TRELLIS_LEARNER_INTERNAL_DATA_PARALLEL_H_

// Data parallelism across learner ranks: over Gloo (c10d's
// ProcessGroupGloo with the rendezvous store of comm/tcp_store.h, as the
// gloo weight transport makes them) for a learner on the CPU, over NCCL
// (nccl_group.h, the same store) for one on a CUDA device. Gradients are
// summed across ranks and, with ZeRO-1, each parameter is updated by the
// one rank that owns it and broadcast from there; ZeRO-2 and 3 gather flat
// shards and reduce-scatter into them (flat_shards.h). Tensors travel
// flattened into buckets (group_common.h), never one call per tensor.
// Every call counts the bytes it moved and the seconds it took.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "learner/group_member.h"

namespace trellis::learner::internal {

struct GroupOptions {
  GroupMember member;
  // Rendezvous and every collective fail past this.
  absl::Duration timeout = absl::Minutes(10);
  // The largest flat buffer one collective carries.
  int64_t bucket_bytes = int64_t{64} << 20;
  // Names the group's errors ("learner-1").
  std::string worker_id = "learner";
  // Where the group's tensors live: the CPU's go over Gloo, a CUDA
  // device's over NCCL on that device (a build without NCCL fails to join
  // such a group of more than one rank, saying so).
  torch::Device device = torch::kCPU;
};

// What the group moved since the last TakeTraffic: payload bytes of the
// collectives this rank took part in (each buffer counted once, whether
// sent or received) and the seconds spent in them.
struct Traffic {
  int64_t bytes = 0;
  double seconds = 0;
};

class DataParallelGroup {
 public:
  // Joins the group: rank 0 hosts the store, the others reach it within
  // `timeout`. A group of size 1 connects nothing and moves nothing.
  // InvalidArgument names a bad option; FailedPrecondition a CUDA device
  // this build or machine cannot serve (no NCCL, no such device);
  // Unavailable or DeadlineExceeded a rendezvous that failed.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<DataParallelGroup>> Join(
      const GroupOptions& options);
  virtual ~DataParallelGroup() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Replaces every tensor with its sum over the ranks. REQUIRES: every rank
  // passes tensors of the same shapes and dtypes, in the same order.
  [[nodiscard]] virtual absl::Status AllReduceSum(const std::vector<torch::Tensor>& tensors) = 0;

  // Replaces tensors[i] with rank owners[i]'s copy. REQUIRES: the same
  // shapes, dtypes and owners on every rank.
  [[nodiscard]] virtual absl::Status Broadcast(const std::vector<torch::Tensor>& tensors,
                                               const std::vector<int>& owners) = 0;

  // Starts gathering every rank's `shard` into `full`, rank r's at
  // [r * shard.numel(), (r + 1) * shard.numel()); the call it returns waits
  // for the gather to end (once). REQUIRES: full.numel() == size() *
  // shard.numel(), one dtype, both contiguous and 1-D, the same on every
  // rank and in the same order.
  [[nodiscard]] virtual absl::StatusOr<std::function<absl::Status()>> StartAllGather(
      const torch::Tensor& full, const torch::Tensor& shard) = 0;
  // Sums `full` over the ranks and leaves this rank's part of the sum (as
  // StartAllGather places it) in `shard`. REQUIRES: as StartAllGather.
  [[nodiscard]] virtual absl::Status ReduceScatterSum(const torch::Tensor& shard,
                                                      const torch::Tensor& full) = 0;

  // Sums scalars (step statistics) over the ranks, in place.
  [[nodiscard]] virtual absl::Status AllReduceSum(std::vector<double>& values) = 0;

  // The traffic since the last call, then starts counting afresh.
  virtual Traffic TakeTraffic() = 0;

  // The largest bucket allocated so far (the communication buffer).
  virtual int64_t buffer_bytes() const = 0;
};

// The contiguous rows [first, second) of `rows` that `rank` of `ranks`
// trains on: an even split, the first rows % ranks ranks one row more.
std::pair<int64_t, int64_t> RankRows(int64_t rows, int rank, int ranks);

// Assigns each tensor (by its bytes) whole to one of `ranks`, balancing the
// bytes: largest first, each to the least-loaded rank (the lower rank on a
// tie). The same input gives the same owners on every rank.
std::vector<int> ShardByBytes(const std::vector<int64_t>& bytes, int ranks);

}  // namespace trellis::learner::internal

#endif  // TRELLIS_LEARNER_INTERNAL_DATA_PARALLEL_H_
