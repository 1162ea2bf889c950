#ifndef TRELLIS_LOOP_DYNAMIC_SAMPLING_H_
#define TRELLIS_LOOP_DYNAMIC_SAMPLING_H_

// DAPO's dynamic sampling (grpo.dapo.dynamic_sampling), the pure part: which
// groups of a step's samples are useful (their rewards differ, so they carry
// gradient), how many prompts the next rollout round draws, and which groups
// train. The DAPO step (loop/recipes/dapo.cc) runs the rounds.

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace trellis::loop {

// Rewards come in consecutive groups of `group_size` (the responses to one
// prompt). REQUIRES: group_size >= 1 and divides rewards.size().
//
// Per group: true when its rewards are not all equal.
std::vector<bool> UsefulGroups(absl::Span<const float> rewards, int64_t group_size);

// Prompts the next round draws, given `want` useful groups per step, and
// `useful` of the `drawn` groups so far useful: the shortfall divided by
// the useful fraction seen so far, rounded up, and at most `want`; `want`
// when none was useful yet. 0 when nothing is short.
int64_t NextRoundPrompts(int64_t want, int64_t useful, int64_t drawn);

struct GroupSelection {
  // Indices of the groups that train: the first `want` useful ones, in order.
  std::vector<int64_t> kept;
  // Groups left out because their rewards are all equal.
  int64_t zero_variance = 0;
  // Useful groups left out because `want` were already kept.
  int64_t surplus = 0;
};
GroupSelection SelectGroups(const std::vector<bool>& useful, int64_t want);

}  // namespace trellis::loop

#endif  // TRELLIS_LOOP_DYNAMIC_SAMPLING_H_
