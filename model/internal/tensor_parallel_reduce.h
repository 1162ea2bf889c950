#ifndef TRELLIS_MODEL_INTERNAL_TENSOR_PARALLEL_REDUCE_H_
#define TRELLIS_MODEL_INTERNAL_TENSOR_PARALLEL_REDUCE_H_

// The all-reduce of a tensor-parallel group whose ranks are threads of one
// process (model/tensor_parallel.h): each rank hands in its partial output
// of a row-parallel projection (o_proj, down_proj) and gets back the sum of
// all ranks' partials. On the CPU the ranks share one memory, so the
// all-reduce is an in-memory sum between two barriers (docs/parallelism.md).

#include <torch/torch.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

namespace trellis::model::internal {

// One forward's all-reduces over `ranks` ranks. Every rank must call Sum
// the same number of times, with partials of one shape.
class InMemoryAllReduce {
 public:
  explicit InMemoryAllReduce(int ranks);

  // Rank `rank`'s partial in; the sum of every rank's partial out, on the
  // partial's device, added in rank order so that every rank gets the same
  // values. Blocks until every rank has handed in its partial. Throws
  // c10::Error once the group is aborted (a rank failed), instead of
  // waiting for a rank that will never come.
  torch::Tensor Sum(int rank, const torch::Tensor& partial);

  // Wakes every rank waiting in Sum, and fails every later Sum: called by
  // a rank that failed, so that the others stop too.
  void Abort();

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
  ScopedRankReduce(InMemoryAllReduce* group, int rank);
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
