#include "loop/rollout_pipeline.h"

#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace trellis::loop {
namespace {

// What the sampling saw: per step, how many steps were trained when it
// started. Stands in for the driver's weights and stream.
struct Trace {
  absl::Mutex mu;
  int64_t trained = 0;
  std::vector<std::pair<int64_t, int64_t>> started;  // (step, trained then)

  RolloutPipeline::SampleFn Sample() {
    return [this](int64_t step) -> absl::StatusOr<SampledStep> {
      absl::MutexLock lock(&mu);
      started.emplace_back(step, trained);
      SampledStep out;
      out.counts.step = step;
      return out;
    };
  }
  void Train(RolloutPipeline& pipeline, int64_t step) {
    {
      absl::MutexLock lock(&mu);
      trained = step + 1;
    }
    pipeline.Trained(step);
  }
};

TEST(RolloutPipeline, StalenessZeroSamplesEachStepAfterThePreviousTrained) {
  Trace trace;
  RolloutPipeline pipeline(0, 4, 0, trace.Sample(), [] { return StreamMark{}; });
  for (int64_t step = 0; step < 4; ++step) {
    absl::StatusOr<SampledStep> s = pipeline.Take(step);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->counts.step, step);
    trace.Train(pipeline, step);
  }
  absl::MutexLock lock(&trace.mu);
  ASSERT_EQ(trace.started.size(), 4u);
  for (const auto& [step, trained] : trace.started) EXPECT_EQ(trained, step);
}

TEST(RolloutPipeline, RunsAheadAtMostMaxStalenessSteps) {
  Trace trace;
  RolloutPipeline pipeline(0, 6, 2, trace.Sample(), [] { return StreamMark{}; });
  // Steps 0, 1 and 2 are sampled before anything trained.
  for (int64_t step = 0; step < 3; ++step) ASSERT_TRUE(pipeline.Take(step).ok());
  for (int64_t step = 0; step < 6; ++step) {
    trace.Train(pipeline, step);
    if (step + 3 < 6) ASSERT_TRUE(pipeline.Take(step + 3).ok());
  }
  absl::MutexLock lock(&trace.mu);
  ASSERT_EQ(trace.started.size(), 6u);
  for (const auto& [step, trained] : trace.started) EXPECT_GE(trained, step - 2) << step;
}

TEST(RolloutPipeline, ResumesAtItsFirstStepAndTellsWhereEachStepDrew) {
  Trace trace;
  uint64_t position = 100;
  RolloutPipeline pipeline(
      3, 5, 1,
      [&](int64_t step) -> absl::StatusOr<SampledStep> {
        position += 10;  // the step's draws
        return trace.Sample()(step);
      },
      [&] { return StreamMark{position, {position - 1}}; });
  const std::optional<StreamMark> third = pipeline.MarkBefore(3);
  const std::optional<StreamMark> fourth = pipeline.MarkBefore(4);
  ASSERT_TRUE(third.has_value() && fourth.has_value());
  EXPECT_EQ(third->position, 100u);
  EXPECT_EQ(third->in_flight, std::vector<uint64_t>{99});
  EXPECT_EQ(fourth->position, 110u);
  EXPECT_FALSE(pipeline.MarkBefore(5).has_value());  // past its steps
  ASSERT_TRUE(pipeline.Take(3).ok());
  ASSERT_TRUE(pipeline.Take(4).ok());
}

TEST(RolloutPipeline, ASamplingErrorReachesTheStepAndEndsThePipeline) {
  RolloutPipeline pipeline(
      0, 5, 1,
      [](int64_t step) -> absl::StatusOr<SampledStep> {
        if (step == 1) return absl::UnavailableError("actor-0 died");
        return SampledStep();
      },
      [] { return StreamMark{}; });
  ASSERT_TRUE(pipeline.Take(0).ok());
  absl::StatusOr<SampledStep> failed = pipeline.Take(1);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(pipeline.Take(2).status().code(), absl::StatusCode::kInternal);
}

TEST(RolloutPipeline, StopsWaitingWhenDestroyed) {
  Trace trace;
  {
    RolloutPipeline pipeline(0, 10, 0, trace.Sample(), [] { return StreamMark{}; });
    ASSERT_TRUE(pipeline.Take(0).ok());
  }  // step 1 waits for step 0 to train: the destructor ends the wait
  absl::MutexLock lock(&trace.mu);
  EXPECT_EQ(trace.started.size(), 1u);
}

}  // namespace
}  // namespace trellis::loop
