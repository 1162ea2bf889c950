// Reward-model training (algorithm "reward_model"): the learner's
// scalar-head model ranks each pair of a fixed preference dataset
// (Bradley-Terry loss), reward_model.* settings. No reference, no rollout.

#include <memory>

#include "loop/pair_training.h"
#include "loop/recipes/builtin.h"

namespace trellis::loop {

absl::Status RegisterRewardModel(RecipeRegistry& registry) {
  RecipeSpec spec;
  spec.rolls_out = false;
  spec.needs_reference = [](const v1::JobConfig&) { return false; };
  spec.steps = [](const v1::JobConfig& job) { return job.reward_model().steps(); };
  spec.create = [](Driver& driver) -> absl::StatusOr<std::unique_ptr<Recipe>> {
    const v1::RewardModelConfig& rm = driver.job().reward_model();
    return std::make_unique<PairRecipe>(
        driver,
        PairRecipe::Settings{rm.steps(), rm.batch_size(), rm.eval_every(), rm.eval_pairs()});
  };
  return registry.Register("reward_model", std::move(spec));
}

}  // namespace trellis::loop
