#ifndef TRELLIS_LOOP_ROLLOUT_PIPELINE_H_
#define TRELLIS_LOOP_ROLLOUT_PIPELINE_H_

// The asynchronous pipeline (job.async, docs/async.md): a thread of its own
// samples the steps in order while the driver's thread trains. Step t is
// sampled once every step before t - max_staleness is trained, so a sample
// trains at most max_staleness policy versions after the one that made it;
// max_staleness 0 samples step t after step t - 1 trained, as the
// synchronous loop does.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "loop/step_samples.h"

namespace trellis::loop {

// Where the RL prompt stream stands between two steps' draws: its position,
// and the stream positions of the groups partial rollout has in flight
// (loop/partial_rollout.h; empty without it).
struct StreamMark {
  uint64_t position = 0;
  std::vector<uint64_t> in_flight;
};

class RolloutPipeline {
 public:
  // Samples one step (on the pipeline's thread).
  using SampleFn = std::function<absl::StatusOr<SampledStep>(int64_t step)>;
  // The RL stream's mark (read on the pipeline's thread before each step
  // draws, for MarkBefore).
  using MarkFn = std::function<StreamMark()>;

  // Starts the thread on steps [first_step, end_step).
  RolloutPipeline(int64_t first_step, int64_t end_step, int max_staleness, SampleFn sample,
                  MarkFn mark);
  // Lets a sampling in progress finish, then ends the thread.
  ~RolloutPipeline();
  RolloutPipeline(const RolloutPipeline&) = delete;
  RolloutPipeline& operator=(const RolloutPipeline&) = delete;

  // `step`'s samples, once sampled; the sampling's error if it failed.
  // REQUIRES: steps are taken in order, each once.
  [[nodiscard]] absl::StatusOr<SampledStep> Take(int64_t step);
  // The learner trained `step`: steps up to step + 1 + max_staleness may
  // be sampled.
  void Trained(int64_t step);
  // The RL stream's mark before `step` drew its prompts (what a
  // checkpoint taken before `step` replays from); nullopt when the
  // pipeline will not sample `step` (past its steps, or it failed), where
  // the stream's mark is the caller's to read.
  std::optional<StreamMark> MarkBefore(int64_t step);

 private:
  void Loop(int64_t first_step);

  const int64_t end_step_;
  const int max_staleness_;
  const SampleFn sample_;
  const MarkFn mark_;
  absl::Mutex mu_;
  // The first step not yet trained.
  int64_t untrained_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::map<int64_t, StreamMark> started_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, absl::StatusOr<SampledStep>> ready_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace trellis::loop

#endif  // TRELLIS_LOOP_ROLLOUT_PIPELINE_H_
