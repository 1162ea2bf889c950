// REINFORCE (algorithm "reinforce"): the policy-gradient step with the
// plainest baseline, the mean reward of the step's kept samples:
// advantage_i = r_i - mean, unscaled (REINFORCE++, grpo.advantage_estimator
// "reinforce_pp", divides by the batch's standard deviation; GRPO and RLOO
// take their baselines per group). The grpo.* settings apply.

#include <memory>
#include <optional>
#include <vector>

#include "learner/advantages.h"
#include "loop/policy_gradient.h"
#include "loop/recipes/builtin.h"

namespace trellis::loop {
namespace {

class Reinforce final : public PolicyGradientRecipe {
 public:
  using PolicyGradientRecipe::PolicyGradientRecipe;

 private:
  absl::StatusOr<std::optional<learner::GroupAdvantages>> Advantages(
      const std::vector<float>& rewards, std::vector<bool>& dropped) const override {
    const int64_t group = driver_.job().grpo().responses_per_prompt();
    double sum = 0;
    int64_t kept = 0;
    for (size_t i = 0; i < rewards.size(); ++i) {
      if (dropped[i]) continue;
      sum += rewards[i];
      ++kept;
    }
    const float mean = kept > 0 ? static_cast<float>(sum / kept) : 0.0f;
    learner::GroupAdvantages adv;
    adv.advantages.assign(rewards.size(), 0.0f);
    adv.zero_variance.assign(rewards.size() / group, true);
    for (size_t i = 0; i < rewards.size(); ++i) {
      if (dropped[i]) continue;
      adv.advantages[i] = rewards[i] - mean;
      if (adv.advantages[i] != 0.0f) adv.zero_variance[i / group] = false;
    }
    return std::make_optional(std::move(adv));
  }
};

}  // namespace

absl::Status RegisterReinforce(RecipeRegistry& registry) {
  RecipeSpec spec;
  spec.needs_reference = [](const v1::JobConfig& job) { return job.grpo().kl_coef() > 0; };
  spec.steps = [](const v1::JobConfig& job) { return job.grpo().steps(); };
  spec.create = [](Driver& driver) -> absl::StatusOr<std::unique_ptr<Recipe>> {
    return std::make_unique<Reinforce>(driver);
  };
  return registry.Register("reinforce", std::move(spec));
}

}  // namespace trellis::loop
