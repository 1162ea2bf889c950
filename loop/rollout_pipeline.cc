#include "loop/rollout_pipeline.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace trellis::loop {

RolloutPipeline::RolloutPipeline(int64_t first_step, int64_t end_step, int max_staleness,
                                 SampleFn sample, MarkFn mark)
    : end_step_(end_step),
      max_staleness_(max_staleness),
      sample_(std::move(sample)),
      mark_(std::move(mark)),
      untrained_(first_step),
      thread_([this, first_step] { Loop(first_step); }) {}

RolloutPipeline::~RolloutPipeline() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void RolloutPipeline::Loop(int64_t first_step) {
  for (int64_t step = first_step; step < end_step_; ++step) {
    {
      absl::MutexLock lock(&mu_);
      // Every step before step - max_staleness trained.
      auto may_start = [this, step]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || untrained_ >= step - max_staleness_;
      };
      mu_.Await(absl::Condition(&may_start));
      if (stop_) break;
      started_[step] = mark_();
    }
    absl::StatusOr<SampledStep> sampled = sample_(step);
    absl::MutexLock lock(&mu_);
    const bool failed = !sampled.ok();
    ready_.emplace(step, std::move(sampled));
    if (failed) break;
  }
  absl::MutexLock lock(&mu_);
  done_ = true;
}

absl::StatusOr<SampledStep> RolloutPipeline::Take(int64_t step) {
  absl::MutexLock lock(&mu_);
  auto ready = [this, step]()
                   ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ready_.count(step) > 0 || done_; };
  mu_.Await(absl::Condition(&ready));
  auto it = ready_.find(step);
  if (it == ready_.end()) {
    return absl::InternalError(absl::StrCat("the rollout pipeline ended before step ", step));
  }
  absl::StatusOr<SampledStep> out = std::move(it->second);
  ready_.erase(it);
  started_.erase(step);
  return out;
}

void RolloutPipeline::Trained(int64_t step) {
  absl::MutexLock lock(&mu_);
  untrained_ = step + 1;
}

std::optional<StreamMark> RolloutPipeline::MarkBefore(int64_t step) {
  absl::MutexLock lock(&mu_);
  auto known = [this, step]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return started_.count(step) > 0 || done_ || step >= end_step_;
  };
  mu_.Await(absl::Condition(&known));
  auto it = started_.find(step);
  if (it == started_.end()) return std::nullopt;
  return it->second;
}

}  // namespace trellis::loop
