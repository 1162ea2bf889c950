#include "config/recipe.h"

namespace trellis::config {

constexpr Recipe kRecipes[] = {Recipe::kGrpo,   Recipe::kPpo,       Recipe::kSft,
                               Recipe::kDpo,    Recipe::kOnlineDpo, Recipe::kRewardModel,
                               Recipe::kDistill};

std::string_view RecipeName(Recipe recipe) {
  switch (recipe) {
    case Recipe::kGrpo: return "grpo";
    case Recipe::kPpo: return "ppo";
    case Recipe::kOnlineDpo: return "online_dpo";
    case Recipe::kDpo: return "dpo";
    case Recipe::kSft: return "sft";
    case Recipe::kRewardModel: return "reward_model";
    case Recipe::kDistill: return "distill";
  }
  return "unknown";
}

std::optional<Recipe> RecipeFromName(std::string_view name) {
  for (Recipe r : kRecipes) {
    if (RecipeName(r) == name) return r;
  }
  return std::nullopt;
}

std::optional<Recipe> RecipeOf(const v1::JobConfig& job) { return RecipeFromName(job.algorithm()); }

bool ReferenceIsTeacher(const v1::JobConfig& job) { return RecipeOf(job) == Recipe::kDistill; }

const v1::ModelConfig& ReferenceModel(const v1::JobConfig& job) {
  return ReferenceIsTeacher(job) ? job.distill().teacher() : job.model();
}

}  // namespace trellis::config
