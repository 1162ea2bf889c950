#ifndef TRELLIS_LEARNER_INTERNAL_PHASES_H_
#define TRELLIS_LEARNER_INTERNAL_PHASES_H_

// The learner's optimizer phases (PhaseId, objective.h): what each trains
// and with which OptimizerConfig, and the ones a checkpoint holds.
//   kSft         the policy's trained weights         sft.optimizer
//   kRl          those and a shared critic's head     grpo.optimizer
//   kCritic      PPO's separate critic                ppo.critic_optimizer
//   kPreference  the policy's trained weights         dpo.optimizer, or
//                                                     reward_model.optimizer

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "learner/internal/learner_models.h"
#include "learner/internal/objective.h"
#include "learner/internal/trainable.h"
#include "model/offload.h"
#include "trellis/v1/job.pb.h"

namespace trellis::learner::internal {

// One training phase's optimizer, the tensors it updates, and how many
// steps it has taken.
struct Phase {
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  TrainableSet params;
  int64_t steps = 0;
  // memory.offload_optimizer_state: the optimizer's state in host memory
  // between its steps (UpdateEngine). A phase restored from a checkpoint
  // starts with its state on the device.
  model::HostOffload offload;
};

// "sft", "rl", "critic", "preference": the prefix of its checkpoint state.
const char* PhaseName(PhaseId id);
const v1::OptimizerConfig& PhaseOptimizer(const v1::JobConfig& job, PhaseId id);
std::vector<torch::Tensor> PhaseParams(LearnerModels& models, PhaseId id);
// The phases a checkpoint holds: sft, rl, and critic with a separate
// critic. (Preference phases are not checkpointed: config refuses
// checkpoint_every for those recipes.)
std::vector<PhaseId> CheckpointPhases(LearnerModels& models);
// The phases that train the policy, whose optimizer state stays resident.
inline constexpr PhaseId kPolicyPhases[] = {PhaseId::kSft, PhaseId::kRl, PhaseId::kPreference};

}  // namespace trellis::learner::internal

#endif  // TRELLIS_LEARNER_INTERNAL_PHASES_H_
