// GRPO (algorithm "grpo"): the policy-gradient step with the advantages of
// grpo.advantage_estimator (GRPO's group-normalized rewards, RLOO,
// REINFORCE++) computed here, against the frozen reference when
// grpo.kl_coef > 0.

#include <memory>

#include "loop/policy_gradient.h"
#include "loop/recipes/builtin.h"

namespace trellis::loop {
namespace {

class Grpo final : public PolicyGradientRecipe {
 public:
  using PolicyGradientRecipe::PolicyGradientRecipe;
};

}  // namespace

absl::Status RegisterGrpo(RecipeRegistry& registry) {
  RecipeSpec spec;
  spec.needs_reference = [](const v1::JobConfig& job) { return job.grpo().kl_coef() > 0; };
  spec.steps = [](const v1::JobConfig& job) { return job.grpo().steps(); };
  spec.create = [](Driver& driver) -> absl::StatusOr<std::unique_ptr<Recipe>> {
    return std::make_unique<Grpo>(driver);
  };
  return registry.Register("grpo", std::move(spec));
}

}  // namespace trellis::loop
