// The built-in objectives, one line each below: X(Factory, BatchKind,
// recipe) declares `ObjectiveFactoryFn Factory`, defined in the objective's
// own file, and registers it for that batch kind under that recipe
// (std::nullopt: every recipe without its own for that batch kind). Adding
// an objective: its file, and its line here.

#include "learner/internal/objective.h"

#define TRELLIS_LEARNER_BUILTIN_OBJECTIVES(X)                    \
  X(NewSftObjective, kSft, std::nullopt)                         \
  X(NewPolicyGradientObjective, kTrain, std::nullopt)            \
  X(NewPpoObjective, kTrain, Recipe::kPpo)                       \
  X(NewPreferenceObjective, kPreference, std::nullopt)           \
  X(NewRewardModelObjective, kPreference, Recipe::kRewardModel)  \
  X(NewDistillObjective, kTrain, Recipe::kDistill)               \
  /* an objective's line goes above */

namespace trellis::learner::internal {

#define TRELLIS_LEARNER_DECLARE_OBJECTIVE(Factory, Kind, RecipeOrAll) ObjectiveFactoryFn Factory;
TRELLIS_LEARNER_BUILTIN_OBJECTIVES(TRELLIS_LEARNER_DECLARE_OBJECTIVE)
#undef TRELLIS_LEARNER_DECLARE_OBJECTIVE

absl::Status RegisterBuiltinObjectives(ObjectiveRegistry& registry) {
  using config::Recipe;
  const std::pair<ObjectiveKey, ObjectiveFactoryFn*> builtins[] = {
#define TRELLIS_LEARNER_OBJECTIVE_ENTRY(Factory, Kind, RecipeOrAll) \
  {{BatchKind::Kind, RecipeOrAll}, &Factory},
      TRELLIS_LEARNER_BUILTIN_OBJECTIVES(TRELLIS_LEARNER_OBJECTIVE_ENTRY)
#undef TRELLIS_LEARNER_OBJECTIVE_ENTRY
  };
  for (const auto& [key, factory] : builtins) {
    if (absl::Status s = registry.Register(key, factory); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace trellis::learner::internal
