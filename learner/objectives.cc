#include "learner/objectives.h"

#include <cmath>

namespace trellis::learner {

double LossNormalizer(v1::LossAggregation aggregation, double total_tokens,
                      double total_sequences) {
  const double n =
      aggregation == v1::SEQUENCE_MEAN ? total_sequences : total_tokens;
  return n > 0 ? n : 1.0;
}

PolicyLoss GrpoLoss(const torch::Tensor& logp, const torch::Tensor& old_logp,
                    const torch::Tensor& ref_logp, const torch::Tensor& advantages,
                    const torch::Tensor& mask, double clip_eps, double kl_coef,
                    v1::LossAggregation aggregation, double normalizer) {
  return ClippedPolicyLoss(logp, old_logp, ref_logp, advantages, mask, clip_eps, clip_eps,
                           kl_coef, aggregation, normalizer);
}

PolicyLoss ClippedPolicyLoss(const torch::Tensor& logp, const torch::Tensor& old_logp,
                             const torch::Tensor& ref_logp, const torch::Tensor& advantages,
                             const torch::Tensor& mask, double clip_low, double clip_high,
                             double kl_coef, v1::LossAggregation aggregation, double normalizer,
                             const torch::Tensor& token_weights) {
  const torch::Tensor adv = advantages.dim() == 1 ? advantages.unsqueeze(1) : advantages;
  const torch::Tensor ratio = torch::exp(logp - old_logp);
  const torch::Tensor unclipped = ratio * adv;
  const torch::Tensor clipped = torch::clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv;
  torch::Tensor token_loss = -torch::min(unclipped, clipped);
  if (token_weights.defined()) token_loss = token_loss * token_weights;
  PolicyLoss out;
  if (kl_coef > 0 && ref_logp.defined()) {
    const torch::Tensor delta = ref_logp - logp;
    const torch::Tensor kl = torch::exp(delta) - delta - 1.0;
    token_loss = token_loss + kl_coef * kl;
    out.kl_sum = (kl * mask).sum().item<double>();
  }
  token_loss = token_loss * mask;
  if (aggregation == v1::SEQUENCE_MEAN) {
    const torch::Tensor lengths = mask.sum(1).clamp_min(1.0);
    out.loss = (token_loss.sum(1) / lengths).sum() / normalizer;
  } else {
    out.loss = token_loss.sum() / normalizer;
  }
  out.clipped_tokens = ((clipped < unclipped).to(torch::kFloat32) * mask).sum().item<double>();
  out.tokens = mask.sum().item<double>();
  return out;
}

DecoupledTerms DecoupledWeights(const torch::Tensor& logp, const torch::Tensor& behaviour_logp,
                                const torch::Tensor& mask, double cap) {
  torch::NoGradGuard no_grad;
  DecoupledTerms out;
  out.proximal = logp.detach();
  const torch::Tensor delta = (out.proximal - behaviour_logp) * mask;
  out.weights = torch::clamp_max(torch::exp(delta), cap);
  out.gap_sum = delta.abs().sum().item<double>();
  out.truncated_tokens =
      ((torch::exp(delta) > cap).to(torch::kFloat32) * mask).sum().item<double>();
  return out;
}

torch::Tensor TeacherDivergence(const torch::Tensor& student_logp,
                                const torch::Tensor& teacher_logp,
                                v1::DistillConfig::Divergence divergence, double jsd_beta) {
  torch::NoGradGuard no_grad;
  const torch::Tensor s = student_logp.detach();
  const torch::Tensor t = teacher_logp.detach();
  if (divergence == v1::DistillConfig::REVERSE_KL) return s - t;
  const torch::Tensor m =
      torch::logaddexp(t + std::log(jsd_beta), s + std::log1p(-jsd_beta));
  return (1.0 - jsd_beta) * (s - m) + jsd_beta * torch::exp(t - s) * (t - m);
}

torch::Tensor TeacherCost(const torch::Tensor& student_logp, const torch::Tensor& teacher_logp,
                          v1::DistillConfig::Divergence divergence, double jsd_beta) {
  torch::NoGradGuard no_grad;
  const torch::Tensor s = student_logp.detach();
  const torch::Tensor t = teacher_logp.detach();
  if (divergence == v1::DistillConfig::REVERSE_KL) return s - t;
  return (1.0 - jsd_beta) *
         (s - torch::logaddexp(t + std::log(jsd_beta), s + std::log1p(-jsd_beta)));
}

torch::Tensor SftLoss(const torch::Tensor& logp, const torch::Tensor& mask,
                      double normalizer) {
  return -(logp * mask).sum() / normalizer;
}

}  // namespace trellis::learner
