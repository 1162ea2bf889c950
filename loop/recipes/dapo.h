#ifndef TRELLIS_LOOP_RECIPES_DAPO_H_
#define TRELLIS_LOOP_RECIPES_DAPO_H_

// DAPO's dynamic sampling (grpo.dapo.dynamic_sampling) as a policy-gradient
// step runs it: more rollout rounds until grpo.prompts_per_step groups have
// rewards that differ or grpo.dapo.max_sampling_rounds have run. (Its pure
// part is loop/dynamic_sampling.h; overlong filtering is BatchInput's.)

#include <cstdint>

#include "absl/status/statusor.h"
#include "ledger/ledger.h"
#include "loop/driver.h"

namespace trellis::loop {

struct RewardSummary {
  double mean_reward = 0;
  double accuracy = 0;
};

// Runs the rounds after `drawn` (round 0 of `step`), then leaves only the
// first prompts_per_step useful groups in *drawn. Counts the rounds,
// prompts, seconds and left-out samples in `counts`; returns the reward and
// accuracy of every sample drawn (the policy's, before zero-variance groups
// are left out).
[[nodiscard]] absl::StatusOr<RewardSummary> SampleUsefulGroups(Driver& driver, int64_t step,
                                                               StepSamples* drawn,
                                                               ledger::StepCounts& counts);

}  // namespace trellis::loop

#endif  // TRELLIS_LOOP_RECIPES_DAPO_H_
