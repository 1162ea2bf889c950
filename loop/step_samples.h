#ifndef TRELLIS_LOOP_STEP_SAMPLES_H_
#define TRELLIS_LOOP_STEP_SAMPLES_H_

// What a step samples: its rollout rounds' groups with their verdicts, and
// what the sampling counted (made on the asynchronous pipeline's thread,
// loop/rollout_pipeline.h, or in the step itself).

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/time/time.h"
#include "data/dataset.h"
#include "ledger/ledger.h"
#include "loop/partial_rollout.h"
#include "loop/streaming_verify.h"
#include "trellis/v1/environment.pb.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::loop {

// A step's samples: the groups of every rollout round, in order.
struct StepSamples {
  std::vector<const data::Example*> examples;  // one per group
  v1::GenerateResponse rollout;                // samples; generated_tokens summed
  v1::VerifyResponse verdicts;                 // results in sample order; each part's stats
  double verify_overlap_seconds = 0;           // verification while the rollout ran
  int64_t rewards_clipped = 0;                 // by the reward rule (reward_rule.h)
  // Multi-turn rollouts (job.environment): what the environment saw over
  // the rounds; unset otherwise.
  std::optional<v1::EnvironmentStats> environment;
  double rollout_seconds = 0;  // the rounds' rollouts, episodes included
  PartialCounts partial;
};

// The step record's rollout_actors: what the rollout says (an actor pool
// counts the members that answered), else 1: a single actor does not count
// itself.
inline int64_t RolloutActors(const StepSamples& drawn) {
  return drawn.rollout.actors() > 0 ? drawn.rollout.actors() : 1;
}

// A rollout round generated, its verification still running on its
// StreamingVerify's thread (Driver::FinishRound completes it).
struct PendingRound {
  std::vector<const data::Example*> examples;  // one per group
  std::unique_ptr<StreamingVerify> verifying;
  // Multi-turn rounds (job.environment): the environment's rewards as
  // verdicts (loop/episode_runner.h EpisodeVerdicts) and its stats;
  // `verifying` is null.
  std::optional<v1::VerifyResponse> episode_verdicts;
  v1::EnvironmentStats environment;
  v1::GenerateResponse rollout;
  absl::Time start;
  absl::Time rollout_end;
  PartialCounts partial;
};

// One step's sampling as a recipe runs it (its rounds, DAPO's extra ones).
struct SampledStep {
  StepSamples drawn;
  // Under job.async: the first round, its verification still running
  // (beside the next rollout and the update); Driver::FinishSampling adds
  // it to `drawn` and `counts`.
  std::unique_ptr<PendingRound> pending;
  // The sampling's counters: prompts (with DAPO's extra), samples, tokens,
  // overlapped verification, extra rounds and their left-out samples.
  ledger::StepCounts counts;
  // DAPO dynamic sampling: counts.mean_reward and counts.accuracy are over
  // every sample drawn, and the step reports them instead of its batch's.
  bool rewards_over_all_drawn = false;
};

}  // namespace trellis::loop

#endif  // TRELLIS_LOOP_STEP_SAMPLES_H_
