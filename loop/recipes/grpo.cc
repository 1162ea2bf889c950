// GRPO (algorithm "grpo"): the policy-gradient step with the advantages of
// grpo.advantage_estimator (GRPO's group-normalized rewards, RLOO,
// REINFORCE++) computed here, against the frozen reference when
// grpo.kl_coef > 0.

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "learner/advantages.h"
#include "loop/policy_gradient.h"
#include "loop/recipes/builtin.h"

namespace trellis::loop {
namespace {

class Grpo final : public PolicyGradientRecipe {
 public:
  Grpo(Driver& driver, learner::AdvantageEstimator estimator)
      : PolicyGradientRecipe(driver), estimator_(estimator) {}

 private:
  absl::StatusOr<std::optional<learner::GroupAdvantages>> Advantages(
      const std::vector<float>& rewards, std::vector<bool>& dropped) const override {
    const v1::GrpoConfig& grpo = driver_.job().grpo();
    const int64_t group = grpo.responses_per_prompt();
    absl::StatusOr<learner::GroupAdvantages> adv;
    if (std::find(dropped.begin(), dropped.end(), true) != dropped.end()) {
      adv = learner::AdvantagesWithout(estimator_, rewards, dropped, group, grpo.scale_rewards());
    } else {
      const std::vector<int64_t> sizes(rewards.size() / group, group);
      adv = learner::ComputeAdvantages(estimator_, rewards, sizes, grpo.scale_rewards());
    }
    if (!adv.ok()) return adv.status();
    return std::make_optional(*std::move(adv));
  }

  const learner::AdvantageEstimator estimator_;
};

}  // namespace

absl::Status RegisterGrpo(RecipeRegistry& registry) {
  RecipeSpec spec;
  spec.needs_reference = [](const v1::JobConfig& job) { return job.grpo().kl_coef() > 0; };
  spec.steps = [](const v1::JobConfig& job) { return job.grpo().steps(); };
  spec.create = [](Driver& driver) -> absl::StatusOr<std::unique_ptr<Recipe>> {
    return std::make_unique<Grpo>(driver, driver.job().grpo().advantage_estimator());
  };
  return registry.Register("grpo", std::move(spec));
}

}  // namespace trellis::loop
