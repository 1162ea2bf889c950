// On-policy distillation (algorithm "distill"): the policy-gradient step of
// grpo (its rollout, batch and optimizer settings) where the student, the
// policy, samples, the reference role, which serves the frozen teacher of
// distill.teacher, scores every token of the samples, and the learner's
// distill objective gives each token the advantage -divergence_weight x
// its divergence to the teacher + reward_weight x its sample's advantage
// from the verifier's rewards (grpo.advantage_estimator). No KL penalty:
// grpo.kl_coef does not apply.

#include <memory>

#include "loop/policy_gradient.h"
#include "loop/recipes/builtin.h"

namespace trellis::loop {
namespace {

class Distill final : public PolicyGradientRecipe {
 public:
  using PolicyGradientRecipe::PolicyGradientRecipe;

 private:
  ReferenceUse reference_use() const override { return ReferenceUse::kTeacher; }
};

}  // namespace

absl::Status RegisterDistill(RecipeRegistry& registry) {
  RecipeSpec spec;
  spec.needs_reference = [](const v1::JobConfig& job) { return true; };
  spec.steps = [](const v1::JobConfig& job) { return job.grpo().steps(); };
  spec.create = [](Driver& driver) -> absl::StatusOr<std::unique_ptr<Recipe>> {
    return std::make_unique<Distill>(driver);
  };
  return registry.Register("distill", std::move(spec));
}

}  // namespace trellis::loop
