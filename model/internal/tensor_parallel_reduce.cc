#include "model/internal/tensor_parallel_reduce.h"

#include <utility>

namespace trellis::model::internal {
namespace {

// The group and rank of the tensor-parallel rank this thread runs.
struct RankOfThread {
  RankAllReduce* group = nullptr;
  int rank = 0;
};

thread_local RankOfThread current;

}  // namespace

InMemoryAllReduce::InMemoryAllReduce(int ranks) : ranks_(ranks), partials_(ranks) {
  TORCH_CHECK(ranks >= 1, "InMemoryAllReduce: ranks must be >= 1, got ", ranks);
}

absl::Status InMemoryAllReduce::Begin() {
  const std::lock_guard<std::mutex> lock(mu_);
  aborted_ = false;
  waiting_ = 0;
  for (torch::Tensor& p : partials_) p = torch::Tensor();
  return absl::OkStatus();
}

void InMemoryAllReduce::Barrier(std::unique_lock<std::mutex>& lock) {
  TORCH_CHECK(!aborted_, "tensor-parallel all-reduce: another rank failed");
  const int64_t generation = generation_;
  if (++waiting_ == ranks_) {
    waiting_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != generation || aborted_; });
  TORCH_CHECK(generation_ != generation, "tensor-parallel all-reduce: another rank failed");
}

torch::Tensor InMemoryAllReduce::Sum(int rank, const torch::Tensor& partial) {
  TORCH_CHECK(rank >= 0 && rank < ranks_, "InMemoryAllReduce: rank ", rank, " outside [0, ", ranks_,
              ")");
  std::unique_lock<std::mutex> lock(mu_);
  partials_[rank] = partial;
  Barrier(lock);
  lock.unlock();
  // Every partial is in and none changes until the second barrier.
  torch::Tensor sum = partials_[0].to(partial.device());
  for (int r = 1; r < ranks_; ++r) sum = sum + partials_[r].to(partial.device());
  lock.lock();
  Barrier(lock);
  partials_[rank] = torch::Tensor();
  return sum;
}

void InMemoryAllReduce::Abort() {
  const std::lock_guard<std::mutex> lock(mu_);
  aborted_ = true;
  cv_.notify_all();
}

ScopedRankReduce::ScopedRankReduce(RankAllReduce* group, int rank) {
  TORCH_CHECK(current.group == nullptr, "ScopedRankReduce: already a rank on this thread");
  current = {group, rank};
}

ScopedRankReduce::~ScopedRankReduce() { current = {}; }

torch::Tensor ReduceAcrossRanks(const torch::Tensor& partial) {
  if (current.group == nullptr) return partial;
  return current.group->Sum(current.rank, partial);
}

}  // namespace trellis::model::internal
