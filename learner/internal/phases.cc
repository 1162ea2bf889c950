#include "learner/internal/phases.h"

#include "config/recipe.h"

namespace trellis::learner::internal {

const char* PhaseName(PhaseId id) {
  static constexpr const char* kNames[] = {"sft", "rl", "critic", "preference"};
  return kNames[static_cast<int>(id)];
}

const v1::OptimizerConfig& PhaseOptimizer(const v1::JobConfig& job, PhaseId id) {
  switch (id) {
    case PhaseId::kSft:
      return job.sft().optimizer();
    case PhaseId::kRl:
      return job.grpo().optimizer();
    case PhaseId::kCritic:
      return job.ppo().critic_optimizer();
    case PhaseId::kPreference:
      break;
  }
  return config::RecipeOf(job) == config::Recipe::kRewardModel ? job.reward_model().optimizer()
                                                               : job.dpo().optimizer();
}

std::vector<torch::Tensor> PhaseParams(LearnerModels& models, PhaseId id) {
  if (id == PhaseId::kCritic) return models.critic()->parameters();
  std::vector<torch::Tensor> params = models.TrainedParams();
  if (id == PhaseId::kRl && models.value_head()) params.push_back(models.value_head()->weight);
  return params;
}

std::vector<PhaseId> CheckpointPhases(LearnerModels& models) {
  std::vector<PhaseId> phases = {PhaseId::kSft, PhaseId::kRl};
  if (!models.critic().is_empty()) phases.push_back(PhaseId::kCritic);
  return phases;
}

}  // namespace trellis::learner::internal
