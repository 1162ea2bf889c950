#ifndef TRELLIS_LEARNER_ADVANTAGES_H_
#define TRELLIS_LEARNER_ADVANTAGES_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace trellis::learner {

struct GroupAdvantages {
  // One per reward, in order.
  std::vector<float> advantages;
  // Per group: its rewards are all equal, so every advantage in it is zero
  // and it carries no gradient.
  std::vector<bool> zero_variance;
};

// GRPO advantages: rewards come in consecutive groups of `group_size` (the
// responses to one prompt); each is centred on its group mean and, when
// `scale` is set, divided by the group's standard deviation (population
// std, plus `eps`). scale = false is Dr.GRPO's unscaled variant.
// InvalidArgument when the reward count is not a multiple of group_size.
[[nodiscard]] absl::StatusOr<GroupAdvantages> ComputeGroupAdvantages(
    absl::Span<const float> rewards, int64_t group_size, bool scale,
    double eps = 1e-6);

}  // namespace trellis::learner

#endif  // TRELLIS_LEARNER_ADVANTAGES_H_
