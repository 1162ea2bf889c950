#ifndef TRELLIS_CONFIG_RECIPE_H_
#define TRELLIS_CONFIG_RECIPE_H_

// JobConfig.algorithm as the layers below the loop branch on it (config
// checks, learner, reference, ledger): parsed into an enum, its own small
// library so that the learner and the reference can use it without the
// YAML config. Which names are recipes, and each recipe's roles and steps,
// are the loop's recipe registry's (loop/recipe.h): a recipe registered
// there that no lower layer tells apart needs no entry here.

#include <optional>
#include <string_view>

#include "trellis/v1/job.pb.h"

namespace trellis::config {

// The recipes a lower layer asks about by name.
enum class Recipe { kGrpo, kPpo, kSft, kDpo, kOnlineDpo, kRewardModel, kDistill };

// "grpo", "ppo", "sft", "dpo", "online_dpo", "reward_model", "distill".
std::string_view RecipeName(Recipe recipe);
// RecipeName's inverse; nullopt for any other name.
std::optional<Recipe> RecipeFromName(std::string_view name);
// The recipe `job.algorithm` names; nullopt for a recipe without an entry
// here (or a name that is no recipe: loop::CheckRecipe refuses it).
std::optional<Recipe> RecipeOf(const v1::JobConfig& job);

// The model the job's reference role serves: distill.teacher under
// algorithm distill (a frozen teacher of its own shape, loaded from its own
// weights), else model (a frozen copy of the policy the run takes).
const v1::ModelConfig& ReferenceModel(const v1::JobConfig& job);
// Whether the reference role serves the distill teacher (then the run
// never loads the policy's weights into it).
bool ReferenceIsTeacher(const v1::JobConfig& job);

}  // namespace trellis::config

#endif  // TRELLIS_CONFIG_RECIPE_H_
