#ifndef TRELLIS_LEARNER_LOSSES_H_
#define TRELLIS_LEARNER_LOSSES_H_

// Losses and advantage estimators of PPO, DPO/IPO, RLOO and REINFORCE++, as
// pure functions on tensors laid out like model::TokenBatch ([B, T], the
// response tokens marked by `mask`). (The clipped policy surrogate, with
// DAPO's asymmetric clip, is ClippedPolicyLoss in objectives.h.)

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "trellis/v1/job.pb.h"

namespace trellis::learner {

struct Gae {
  torch::Tensor advantages;  // [B, T], 0 where mask is 0
  torch::Tensor returns;     // advantages + values, 0 where mask is 0
};

// Generalized advantage estimation over each row's masked tokens, from the
// last to the first; positions with mask 0 are skipped (the recursion runs
// through them unchanged) and the value after a row's last token is 0:
//   delta_t = r_t + gamma * V_next - V_t
//   A_t     = delta_t + gamma * lambda * A_next
// rewards, values, mask: [B, T]. No gradient flows (values are detached).
Gae ComputeGae(const torch::Tensor& rewards, const torch::Tensor& values,
               const torch::Tensor& mask, double gamma, double lambda);

// PPO's clipped value loss, summed over masked tokens and divided by
// `normalizer`:
//   0.5 * max((V - R)^2, (V_old + clip(V - V_old, -clip_eps, clip_eps) - R)^2)
// clip_eps <= 0 turns clipping off: 0.5 * (V - R)^2.
torch::Tensor ClippedValueLoss(const torch::Tensor& values, const torch::Tensor& old_values,
                               const torch::Tensor& returns, const torch::Tensor& mask,
                               double clip_eps, double normalizer);

struct PreferenceLoss {
  // Scalar, differentiable: the SUM of the pairs' losses divided by
  // `normalizer` (the pair count of the full batch), so that micro-batches
  // add up to the full batch's mean.
  torch::Tensor loss;
  // Sums over the pairs (not normalized), for stats: the implicit reward
  // margin beta * h, pairs ranked right (margin > 0; a tie counts half),
  // and the implicit rewards beta * (pi - ref) of the chosen and the
  // rejected responses.
  double margin_sum = 0;
  double ranked_right = 0;
  double chosen_reward_sum = 0;
  double rejected_reward_sum = 0;
};

// From per-pair summed log-probs ([N] each) of the policy and the
// reference on the chosen and rejected responses, with
//   h = (pi_c - ref_c) - (pi_r - ref_r):
//   SIGMOID (DPO): -log sigmoid(beta * h)
//   IPO:           (h - 1 / (2 * beta))^2
// computed in float64. Gradients flow into the policy's log-probs only.
PreferenceLoss ComputePreferenceLoss(const torch::Tensor& policy_chosen,
                                     const torch::Tensor& policy_rejected,
                                     const torch::Tensor& ref_chosen,
                                     const torch::Tensor& ref_rejected, double beta,
                                     v1::DpoConfig::Loss kind, double normalizer);

// RLOO: rewards in consecutive groups of `group_size` (>= 2); each is
// centred on the mean of the OTHER rewards of its group:
//   A_i = r_i - (sum_g - r_i) / (k - 1)
// InvalidArgument when group_size < 2 or the count is not a multiple.
[[nodiscard]] absl::StatusOr<std::vector<float>> RlooAdvantages(absl::Span<const float> rewards,
                                                               int64_t group_size);

// REINFORCE++: the batch's returns normalized with the GLOBAL batch mean and
// population standard deviation (no per-prompt groups):
//   A_i = (R_i - mean) / (std + eps)
std::vector<float> ReinforcePlusPlusAdvantages(absl::Span<const float> returns,
                                               double eps = 1e-6);

}  // namespace trellis::learner

#endif  // TRELLIS_LEARNER_LOSSES_H_
