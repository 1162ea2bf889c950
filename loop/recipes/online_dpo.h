#ifndef TRELLIS_LOOP_RECIPES_ONLINE_DPO_H_
#define TRELLIS_LOOP_RECIPES_ONLINE_DPO_H_

// Online DPO (algorithm "online_dpo"): each step samples
// dpo.responses_per_prompt responses to dpo.batch_size prompts, the
// verifier scores them, and each prompt whose responses got different
// rewards gives one pair (the highest reward chosen, the lowest rejected)
// for a DPO / IPO update against the frozen reference. Warm-up, reference,
// evaluation and weight sync are the driver's.

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/types/span.h"

namespace trellis::loop {

// Sample indices of one pair.
struct PairChoice {
  int64_t chosen = 0;
  int64_t rejected = 0;
};

// For each group of `group` consecutive rewards: the first sample with the
// highest reward is chosen and the first with the lowest rejected; a group
// whose rewards are all equal gives no pair (nullopt). A trailing partial
// group is ignored. REQUIRES: group >= 1.
std::vector<std::optional<PairChoice>> ChoosePairs(absl::Span<const float> rewards, int64_t group);

}  // namespace trellis::loop

#endif  // TRELLIS_LOOP_RECIPES_ONLINE_DPO_H_
