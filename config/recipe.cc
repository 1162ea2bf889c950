#include "config/recipe.h"

#include <cstdlib>

namespace trellis::config {

constexpr Recipe kRecipes[] = {Recipe::kGrpo, Recipe::kPpo,       Recipe::kSft,
                               Recipe::kDpo,  Recipe::kOnlineDpo, Recipe::kRewardModel};

std::string_view RecipeName(Recipe recipe) {
  switch (recipe) {
    case Recipe::kGrpo: return "grpo";
    case Recipe::kPpo: return "ppo";
    case Recipe::kOnlineDpo: return "online_dpo";
    case Recipe::kDpo: return "dpo";
    case Recipe::kSft: return "sft";
    case Recipe::kRewardModel: return "reward_model";
  }
  return "unknown";
}

std::string RecipeNames() {
  std::string names;
  for (Recipe r : kRecipes) {
    if (!names.empty()) names += ", ";
    names += RecipeName(r);
  }
  return names;
}

std::optional<Recipe> RecipeFromName(std::string_view name) {
  for (Recipe r : kRecipes) {
    if (RecipeName(r) == name) return r;
  }
  return std::nullopt;
}

Recipe RecipeOf(const v1::JobConfig& job) {
  const std::optional<Recipe> recipe = RecipeFromName(job.algorithm());
  if (!recipe.has_value()) std::abort();  // ValidateJob refuses it first.
  return *recipe;
}

bool IsOffline(Recipe recipe) {
  return recipe == Recipe::kSft || recipe == Recipe::kDpo || recipe == Recipe::kRewardModel;
}

}  // namespace trellis::config
