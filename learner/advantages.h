#ifndef TRELLIS_LEARNER_ADVANTAGES_H_
#define TRELLIS_LEARNER_ADVANTAGES_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "trellis/v1/job.pb.h"

namespace trellis::learner {

struct GroupAdvantages {
  // One per reward, in order.
  std::vector<float> advantages;
  // Per group: every advantage in it is zero, so it carries no gradient
  // (GRPO, RLOO: its rewards are all equal; REINFORCE++: the whole batch's
  // rewards are).
  std::vector<bool> zero_variance;
};

// grpo.advantage_estimator.
using AdvantageEstimator = v1::GrpoConfig::AdvantageEstimator;

// GRPO advantages: rewards come in consecutive groups of `group_size` (the
// responses to one prompt); each is centred on its group mean and, when
// `scale` is set, divided by the group's standard deviation (population
// std, plus `eps`). scale = false is Dr.GRPO's unscaled variant.
// InvalidArgument when the reward count is not a multiple of group_size.
[[nodiscard]] absl::StatusOr<GroupAdvantages> ComputeGroupAdvantages(
    absl::Span<const float> rewards, int64_t group_size, bool scale,
    double eps = 1e-6);

// Advantages under `estimator` of rewards in consecutive groups of the given
// sizes (groups may differ in size, e.g. after samples were dropped):
//   GRPO          ComputeGroupAdvantages per group (`scale`, `eps`);
//   RLOO          RlooAdvantages per group (losses.h): r_i minus the mean of
//                 the others in its group;
//   REINFORCE_PP  ReinforcePlusPlusAdvantages over the whole batch
//                 (losses.h): (r_i - mean) / (std + eps).
// A group (GRPO, RLOO) or batch (REINFORCE++) whose rewards are all equal
// gets exact zeros. InvalidArgument when the sizes do not add up to the
// reward count, a size is below 1, or (RLOO) below 2.
[[nodiscard]] absl::StatusOr<GroupAdvantages> ComputeAdvantages(
    AdvantageEstimator estimator, absl::Span<const float> rewards,
    absl::Span<const int64_t> group_sizes, bool scale, double eps = 1e-6);

// ComputeAdvantages over the samples not `dropped` (fixed groups of `group`
// samples, e.g. after a verifier timeout with timeout_policy drop): each
// group counts its kept samples alone (REINFORCE++: the batch is its kept
// samples); a group with fewer than two kept samples is dropped whole (its
// samples are marked in `dropped`: a lone sample has no baseline). Dropped
// samples get advantage 0; zero_variance has one flag per group (false for
// a dropped group).
[[nodiscard]] absl::StatusOr<GroupAdvantages> AdvantagesWithout(
    AdvantageEstimator estimator, const std::vector<float>& rewards,
    std::vector<bool>& dropped, int64_t group, bool scale);

}  // namespace trellis::learner

#endif  // TRELLIS_LEARNER_ADVANTAGES_H_
