#ifndef TRELLIS_LEDGER_KINDS_H_
#define TRELLIS_LEDGER_KINDS_H_

// The ledger's closed sets and their names in records: the stages of a
// step, the resident objects a role reports (DESIGN.md §5), and the two
// directions of a move between a device and host memory.

#include <optional>
#include <string_view>

namespace trellis::ledger {

enum class Stage {
  kLoad,
  kSft,
  kRollout,
  kVerify,
  kReference,
  kAdvantage,
  kUpdate,
  kWeightSync,
  kEval,
  kCheckpoint,
  // Reward-model scoring (PPO with ppo.reward reward_model).
  kReward,
  // dpo with dpo.reference_logprobs "cached": the reference's log-probs of
  // every pair, computed once before training.
  kReferenceCache,
  // Multi-turn rollouts: waiting for the environment's calls (Open, Step,
  // Close), summed over episodes; it overlaps the rollout
  // (RecordEnvironment).
  kEnvironment,
};
inline constexpr int kNumStages = 13;
std::string_view StageName(Stage stage);
// StageName's inverse; nullopt for a name it never returns.
std::optional<Stage> StageFromName(std::string_view name);

// Resident objects (DESIGN.md §5).
enum class Object {
  kParameters,
  kGradients,
  kOptimizerState,
  kActivations,
  kKvCache,
  kReferenceModel,
  kRolloutBuffer,
  kCommunication,
  // PPO: the critic (its weights, or the value head on a shared trunk) and
  // the reward model.
  kCritic,
  kRewardModel,
  // Temporaries a role measured at its own peak on top of the objects it
  // names: a forward's, backward's or optimizer step's scratch tensors, a
  // sampler's logits. Reported with its size at the peak, then 0 (freed).
  kWorkspace,
  // Memory strategies (job.proto MemoryConfig): bf16's fp32 master copy of
  // the weights, and LoRA's adapter weights (kParameters is then the frozen
  // base; the adapters' gradients and optimizer state count in kGradients
  // and kOptimizerState, the only ones there are).
  kMasterWeights,
  kAdapters,
  // memory.zero_stage 3: the whole buffers of the units a learner rank has
  // gathered from the other ranks' shards (learner/internal/flat_shards.h),
  // at its peak; kParameters is then its own shards.
  kGatheredParameters,
};
inline constexpr int kNumObjects = 14;
std::string_view ObjectName(Object object);
// ObjectName's inverse; nullopt for a name it never returns.
std::optional<Object> ObjectFromName(std::string_view name);

// Which way a move goes between a role's compute device and host memory
// (model/offload.h): out to the host, or back in to the device.
enum class MoveDirection { kOut, kIn };
std::string_view MoveDirectionName(MoveDirection direction);
// MoveDirectionName's inverse; nullopt for a name it never returns.
std::optional<MoveDirection> MoveDirectionFromName(std::string_view name);

}  // namespace trellis::ledger

#endif  // TRELLIS_LEDGER_KINDS_H_
