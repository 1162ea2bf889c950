#ifndef TRELLIS_LEARNER_OBJECTIVES_H_
#define TRELLIS_LEARNER_OBJECTIVES_H_

// Training objectives on per-token tensors laid out as model::TokenBatch
// ([B, T], response tokens marked by the mask).
//
// Every loss here is a SUM over the micro-batch divided by a normalizer of
// the FULL batch (its token count for token_mean, its sequence count for
// sequence_mean), so the gradients of the micro-batches add up to exactly
// the full-batch gradient whatever the split.

#include <torch/torch.h>

#include "trellis/v1/job.pb.h"

namespace trellis::learner {

// The full-batch normalizer for `aggregation`.
double LossNormalizer(v1::LossAggregation aggregation, double total_tokens,
                      double total_sequences);

struct PolicyLoss {
  torch::Tensor loss;  // scalar, differentiable
  // Sums over the micro-batch's response tokens (not normalized), for stats.
  double kl_sum = 0;
  double clipped_tokens = 0;
  double tokens = 0;
};

// GRPO / PPO clipped surrogate with a k3 KL penalty to the reference:
//   ratio = exp(logp - old_logp)
//   pg    = -min(ratio * A, clip(ratio, 1 - clip_eps, 1 + clip_eps) * A)
//   kl    = exp(ref - logp) - (ref - logp) - 1
//   token loss = pg + kl_coef * kl
// aggregated per `aggregation` and divided by `normalizer`.
// logp, old_logp, mask: [B, T]; ref_logp: [B, T] or undefined when
// kl_coef == 0; advantages: [B] (one per sequence) or [B, T] (per token,
// PPO's GAE).
PolicyLoss GrpoLoss(const torch::Tensor& logp, const torch::Tensor& old_logp,
                    const torch::Tensor& ref_logp, const torch::Tensor& advantages,
                    const torch::Tensor& mask, double clip_eps, double kl_coef,
                    v1::LossAggregation aggregation, double normalizer);

// GrpoLoss with an asymmetric clip range [1 - clip_low, 1 + clip_high]
// (DAPO's clip-higher: clip_high > clip_low leaves room for low-probability
// tokens to grow). GrpoLoss is clip_low = clip_high = clip_eps.
// `token_weights` ([B, T], undefined: 1) multiplies each token's pg term
// (decoupled PPO's importance weights, DecoupledWeights).
PolicyLoss ClippedPolicyLoss(const torch::Tensor& logp, const torch::Tensor& old_logp,
                             const torch::Tensor& ref_logp, const torch::Tensor& advantages,
                             const torch::Tensor& mask, double clip_low, double clip_high,
                             double kl_coef, v1::LossAggregation aggregation, double normalizer,
                             const torch::Tensor& token_weights = torch::Tensor());

// Decoupled PPO (AReaL; verl's truncated importance sampling) for samples
// an older policy generated (job.async): the clipped ratio is taken against
// the proximal policy, the learner's before this update (`logp` detached:
// one optimizer step per call, so every micro-batch's forward sees it), and
// each token's term is weighted by
//   w = min(exp(proximal - behaviour), cap)
// where behaviour is the actor's log-prob. logp, behaviour_logp, mask: [B, T].
struct DecoupledTerms {
  torch::Tensor proximal;  // [B, T], no gradient: ClippedPolicyLoss's old_logp
  torch::Tensor weights;   // [B, T], no gradient: its token_weights
  // Sums over the masked tokens: |behaviour - proximal|, weights truncated.
  double gap_sum = 0;
  double truncated_tokens = 0;
};
DecoupledTerms DecoupledWeights(const torch::Tensor& logp, const torch::Tensor& behaviour_logp,
                                const torch::Tensor& mask, double cap);

// On-policy distillation (algorithm distill): each token's divergence from
// the teacher, estimated on the sampled token x from the student's log-prob
// s = log p_S(x) (the sampling policy's) and the teacher's t = log p_T(x):
//   REVERSE_KL  d = s - t                          (KL(S || T))
//   JSD         d = (1 - b) (s - m) + b e^(t - s) (t - m),
//               m = log(b e^t + (1 - b) e^s)       (b KL(T || M) + (1 - b) KL(S || M))
// with b = jsd_beta in (0, 1) and M the mixture b T + (1 - b) S; m is taken
// with logaddexp, so no probability is formed. The importance weight
// e^(t - s) is exact: finite while t - s stays within the dtype's exponent
// range (88 in float32; a sampled token has s well above that). Elementwise,
// no gradient.
torch::Tensor TeacherDivergence(const torch::Tensor& student_logp,
                                const torch::Tensor& teacher_logp,
                                v1::DistillConfig::Divergence divergence, double jsd_beta);

// The per-token cost whose score-function gradient, E_S[cost ∇ log p_S],
// is the gradient of TeacherDivergence's mean over the student's samples:
// the estimate d itself depends on the student through s, and differentiating
// it adds s ∂d/∂s. For REVERSE_KL that adds 1, which changes no expectation,
// so the cost is d = s - t; for JSD it cancels the teacher's term, leaving
// (1 - b)(s - m). Elementwise, no gradient.
torch::Tensor TeacherCost(const torch::Tensor& student_logp, const torch::Tensor& teacher_logp,
                          v1::DistillConfig::Divergence divergence, double jsd_beta);

// Cross-entropy on the masked targets: -sum(logp * mask) / normalizer.
torch::Tensor SftLoss(const torch::Tensor& logp, const torch::Tensor& mask,
                      double normalizer);

}  // namespace trellis::learner

#endif  // TRELLIS_LEARNER_OBJECTIVES_H_
