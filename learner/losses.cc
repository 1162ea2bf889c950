#include "learner/losses.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace trellis::learner {

Gae ComputeGae(const torch::Tensor& rewards, const torch::Tensor& values,
               const torch::Tensor& mask, double gamma, double lambda) {
  torch::NoGradGuard no_grad;
  const torch::Tensor r = rewards.to(torch::kFloat64);
  const torch::Tensor v = values.detach().to(torch::kFloat64);
  const torch::Tensor m = mask.to(torch::kFloat64);
  const int64_t rows = r.size(0), steps = r.size(1);
  torch::Tensor adv = torch::zeros({rows, steps}, torch::kFloat64);
  torch::Tensor next_adv = torch::zeros({rows}, torch::kFloat64);
  torch::Tensor next_value = torch::zeros({rows}, torch::kFloat64);
  for (int64_t t = steps - 1; t >= 0; --t) {
    const torch::Tensor mt = m.select(1, t);
    const torch::Tensor vt = v.select(1, t);
    const torch::Tensor delta = r.select(1, t) + gamma * next_value - vt;
    const torch::Tensor a = delta + gamma * lambda * next_adv;
    adv.select(1, t).copy_(a * mt);
    next_adv = mt * a + (1 - mt) * next_adv;
    next_value = mt * vt + (1 - mt) * next_value;
  }
  Gae out;
  out.advantages = adv.to(rewards.scalar_type());
  out.returns = ((adv + v) * m).to(rewards.scalar_type());
  return out;
}

torch::Tensor ClippedValueLoss(const torch::Tensor& values, const torch::Tensor& old_values,
                               const torch::Tensor& returns, const torch::Tensor& mask,
                               double clip_eps, double normalizer) {
  torch::Tensor loss = (values - returns).pow(2);
  if (clip_eps > 0) {
    const torch::Tensor clipped =
        old_values + torch::clamp(values - old_values, -clip_eps, clip_eps);
    loss = torch::max(loss, (clipped - returns).pow(2));
  }
  return 0.5 * (loss * mask).sum() / normalizer;
}

PreferenceLoss ComputePreferenceLoss(const torch::Tensor& policy_chosen,
                                     const torch::Tensor& policy_rejected,
                                     const torch::Tensor& ref_chosen,
                                     const torch::Tensor& ref_rejected, double beta,
                                     v1::DpoConfig::Loss kind, double normalizer) {
  const auto f64 = [](const torch::Tensor& t) { return t.to(torch::kFloat64); };
  const torch::Tensor chosen = f64(policy_chosen) - f64(ref_chosen).detach();
  const torch::Tensor rejected = f64(policy_rejected) - f64(ref_rejected).detach();
  const torch::Tensor h = chosen - rejected;
  PreferenceLoss out;
  if (kind == v1::DpoConfig::IPO) {
    out.loss = (h - 1.0 / (2.0 * beta)).pow(2).sum() / normalizer;
  } else {
    out.loss = -torch::log_sigmoid(beta * h).sum() / normalizer;
  }
  const torch::Tensor margin = beta * h.detach();
  out.margin_sum = margin.sum().item<double>();
  out.ranked_right = ((margin > 0).to(torch::kFloat64).sum() +
                      0.5 * (margin == 0).to(torch::kFloat64).sum())
                         .item<double>();
  out.chosen_reward_sum = (beta * chosen.detach()).sum().item<double>();
  out.rejected_reward_sum = (beta * rejected.detach()).sum().item<double>();
  return out;
}

absl::StatusOr<std::vector<float>> RlooAdvantages(absl::Span<const float> rewards,
                                                  int64_t group_size) {
  if (group_size < 2 || rewards.size() % group_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RLOO: expected groups of at least 2 responses dividing the ", rewards.size(),
        " rewards; found group size ", group_size));
  }
  std::vector<float> adv(rewards.size());
  for (size_t g = 0; g < rewards.size(); g += group_size) {
    double sum = 0;
    for (int64_t k = 0; k < group_size; ++k) sum += rewards[g + k];
    for (int64_t k = 0; k < group_size; ++k) {
      const double r = rewards[g + k];
      adv[g + k] = static_cast<float>(r - (sum - r) / (group_size - 1));
    }
  }
  return adv;
}

std::vector<float> ReinforcePlusPlusAdvantages(absl::Span<const float> returns, double eps) {
  std::vector<float> adv(returns.size());
  if (returns.empty()) return adv;
  double mean = 0;
  for (float r : returns) mean += r;
  mean /= returns.size();
  double var = 0;
  for (float r : returns) var += (r - mean) * (r - mean);
  const double std = std::sqrt(var / returns.size());
  for (size_t i = 0; i < returns.size(); ++i) {
    adv[i] = static_cast<float>((returns[i] - mean) / (std + eps));
  }
  return adv;
}

}  // namespace trellis::learner
