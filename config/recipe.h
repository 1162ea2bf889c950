#ifndef TRELLIS_CONFIG_RECIPE_H_
#define TRELLIS_CONFIG_RECIPE_H_

// JobConfig.algorithm as the code branches on it: parsed once, compared as
// an enum (its own small library, so that the learner and the reference can
// use it without the YAML config).

#include <optional>
#include <string>
#include <string_view>

#include "trellis/v1/job.pb.h"

namespace trellis::config {

// The recipes of job.proto's JobConfig.algorithm.
enum class Recipe { kGrpo, kPpo, kSft, kDpo, kOnlineDpo, kRewardModel };

// "grpo", "ppo", "sft", "dpo", "online_dpo", "reward_model".
std::string_view RecipeName(Recipe recipe);
// Every recipe's name, in the enum's order, joined by ", ".
std::string RecipeNames();
// RecipeName's inverse; nullopt for a name that is not a recipe.
std::optional<Recipe> RecipeFromName(std::string_view name);
// The recipe `job.algorithm` names. REQUIRES: the job validated (ValidateJob
// refuses an unknown algorithm).
Recipe RecipeOf(const v1::JobConfig& job);

// The recipes that train on fixed data with no rollout: sft, dpo,
// reward_model (the offline loop's).
bool IsOffline(Recipe recipe);

}  // namespace trellis::config

#endif  // TRELLIS_CONFIG_RECIPE_H_
