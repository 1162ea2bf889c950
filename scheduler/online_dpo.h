#ifndef TRELLIS_SCHEDULER_ONLINE_DPO_H_
#define TRELLIS_SCHEDULER_ONLINE_DPO_H_

// Online DPO (algorithm "online_dpo"): each step samples
// dpo.responses_per_prompt responses to dpo.batch_size prompts, the
// verifier scores them, and each prompt whose responses got different
// rewards gives one pair (the highest reward chosen, the lowest rejected)
// for a DPO / IPO update against the frozen reference. The step itself is
// GrpoLoop::OnlineDpoStep (online_dpo.cc); warm-up, reference, evaluation
// and weight sync are GrpoLoop's.

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/types/span.h"
#include "trellis/v1/job.pb.h"

namespace trellis::scheduler {

// Responses sampled per prompt: dpo.responses_per_prompt for online_dpo,
// grpo.responses_per_prompt otherwise.
int64_t ResponsesPerPrompt(const v1::JobConfig& job);

// Sample indices of one pair.
struct PairChoice {
  int64_t chosen = 0;
  int64_t rejected = 0;
};

// For each group of `group` consecutive rewards: the first sample with the
// highest reward is chosen and the first with the lowest rejected; a group
// whose rewards are all equal gives no pair (nullopt). A trailing partial
// group is ignored. REQUIRES: group >= 1.
std::vector<std::optional<PairChoice>> ChoosePairs(absl::Span<const float> rewards,
                                                   int64_t group);

}  // namespace trellis::scheduler

#endif  // TRELLIS_SCHEDULER_ONLINE_DPO_H_
