#ifndef TRELLIS_MODEL_INTERNAL_TENSOR_PARALLEL_REDUCE_H_
#define TRELLIS_MODEL_INTERNAL_TENSOR_PARALLEL_REDUCE_H_

// The all-reduce of a tensor-parallel group whose ranks are threads of one
// process (model/tensor_parallel.h): each rank hands in its partial output
// of a row-parallel projection (o_proj, down_proj) and gets back the sum of
// all ranks' partials. Ranks that share a device (or the CPU's memory) sum
// in memory between two barriers (InMemoryAllReduce); ranks on K distinct
// CUDA devices sum with NCCL (nccl_all_reduce.h). docs/parallelism.md.

#include <torch/torch.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "absl/status/status.h"

namespace trellis::model::internal {

// A group's all-reduces, forward after forward. A forward is Begin, then
// every rank's Sums (each rank the same number, with partials of one
// shape), then End once every rank has stopped.
class RankAllReduce {
 public:
  virtual ~RankAllReduce() = default;

  // Readies the group for one forward, while no rank runs.
  [[nodiscard]] virtual absl::Status Begin() = 0;

  // Rank `rank`'s partial in; the sum of every rank's partial out, on the
  // partial's device. Throws c10::Error once the forward is aborted (a
  // rank failed), instead of waiting for a rank that will never come.
  virtual torch::Tensor Sum(int rank, const torch::Tensor& partial) = 0;

  // Wakes every rank waiting in Sum, and fails every later Sum of this
  // forward: called by a rank that failed, so that the others stop too.
  virtual void Abort() = 0;

  // Ends the forward, once every rank has stopped.
  virtual void End() = 0;
};

// The all-reduce in memory: every rank adds the partials in rank order, so
// that every rank gets the same values.
class InMemoryAllReduce final : public RankAllReduce {
 public:
  explicit InMemoryAllReduce(int ranks);

  // Clears an aborted forward's state.
  absl::Status Begin() override;
  // Blocks until every rank has handed in its partial.
  torch::Tensor Sum(int rank, const torch::Tensor& partial) override;
  void Abort() override;
  void End() override {}

 private:
  // Waits until all ranks reached this barrier (or the group is aborted).
  void Barrier(std::unique_lock<std::mutex>& lock);

  const int ranks_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<torch::Tensor> partials_;  // per rank; read between the barriers
  int waiting_ = 0;
  int64_t generation_ = 0;  // barriers passed
  bool aborted_ = false;
};

// While alive, the blocks this thread runs sum their o_proj and down_proj
// outputs across the group as rank `rank` (ReduceAcrossRanks). Not nested.
class ScopedRankReduce {
 public:
  ScopedRankReduce(RankAllReduce* group, int rank);
  ~ScopedRankReduce();
  ScopedRankReduce(const ScopedRankReduce&) = delete;
  ScopedRankReduce& operator=(const ScopedRankReduce&) = delete;
};

// Called by the decoder block (model/internal/block.cc) on each
// row-parallel projection's output: the group's sum when this thread runs
// a tensor-parallel rank (ScopedRankReduce), else `partial` itself.
torch::Tensor ReduceAcrossRanks(const torch::Tensor& partial);

}  // namespace trellis::model::internal

#endif  // TRELLIS_MODEL_INTERNAL_TENSOR_PARALLEL_REDUCE_H_
