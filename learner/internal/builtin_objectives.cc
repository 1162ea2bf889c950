// The built-in objectives, each defined in the file named beside it and
// registered by one line below: which batches it trains, under which recipe
// (none: every recipe without its own for that batch kind).

#include "learner/internal/objective.h"

namespace trellis::learner::internal {

ObjectiveFactoryFn NewSftObjective;             // sft_objective.cc
ObjectiveFactoryFn NewPolicyGradientObjective;  // policy_gradient_objective.cc
ObjectiveFactoryFn NewPpoObjective;             // ppo_objective.cc
ObjectiveFactoryFn NewPreferenceObjective;      // preference_objective.cc
ObjectiveFactoryFn NewRewardModelObjective;     // reward_model_objective.cc

absl::Status RegisterBuiltinObjectives(ObjectiveRegistry& registry) {
  using config::Recipe;
  const std::pair<ObjectiveKey, ObjectiveFactoryFn*> builtins[] = {
      {{BatchKind::kSft, std::nullopt}, &NewSftObjective},
      {{BatchKind::kTrain, std::nullopt}, &NewPolicyGradientObjective},
      {{BatchKind::kTrain, Recipe::kPpo}, &NewPpoObjective},
      {{BatchKind::kPreference, std::nullopt}, &NewPreferenceObjective},
      {{BatchKind::kPreference, Recipe::kRewardModel}, &NewRewardModelObjective},
  };
  for (const auto& [key, factory] : builtins) {
    if (absl::Status s = registry.Register(key, factory); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace trellis::learner::internal
