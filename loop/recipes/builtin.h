#ifndef TRELLIS_LOOP_RECIPES_BUILTIN_H_
#define TRELLIS_LOOP_RECIPES_BUILTIN_H_

// The built-in recipes, one line each below: X(Name) stands for
//   absl::Status RegisterName(RecipeRegistry& registry);
// defined in loop/recipes/<name>.cc, which registers the recipe under its
// JobConfig.algorithm name. RegisterBuiltinRecipes (loop/recipe.h) calls
// them in this order. Adding a recipe: its file, and its line here.

#include "absl/status/status.h"
#include "loop/recipe.h"

#define TRELLIS_LOOP_BUILTIN_RECIPES(X) \
  X(Grpo) \
  X(Ppo) \
  X(Sft) \
  X(Dpo) \
  X(OnlineDpo) \
  X(RewardModel) \
  X(Reinforce) \
  X(Distill) \
  /* a recipe's line goes above */

namespace trellis::loop {

#define TRELLIS_LOOP_DECLARE_RECIPE(Name) \
  [[nodiscard]] absl::Status Register##Name(RecipeRegistry& registry);
TRELLIS_LOOP_BUILTIN_RECIPES(TRELLIS_LOOP_DECLARE_RECIPE)
#undef TRELLIS_LOOP_DECLARE_RECIPE

}  // namespace trellis::loop

#endif  // TRELLIS_LOOP_RECIPES_BUILTIN_H_
