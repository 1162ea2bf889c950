#ifndef TRELLIS_LEARNER_LEARNER_WORKER_H_
#define TRELLIS_LEARNER_LEARNER_WORKER_H_

// The learner role as the scheduler sees it: supervised and policy-gradient
// updates, weight publication, weight snapshots.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::learner {

class LearnerWorker {
 public:
  virtual ~LearnerWorker() = default;

  // One optimizer step of cross-entropy on the target tokens (prompt tokens
  // masked), token-mean over the whole batch.
  [[nodiscard]] virtual absl::StatusOr<v1::TrainStats> SftStep(
      const v1::SftBatch& batch) = 0;

  // One optimizer step of the GRPO objective over the whole batch, split
  // into micro-batches whose accumulated gradient equals the full-batch
  // gradient. With algorithm "ppo" the samples carry rewards instead of
  // advantages: the learner's critic values them, GAE gives per-token
  // advantages and returns (the rollout buffer), and the policy and the
  // critic each take a step (one step together with a shared critic).
  [[nodiscard]] virtual absl::StatusOr<v1::TrainStats> TrainStep(
      const v1::TrainBatch& batch) = 0;

  // Publishes the current weights as the current policy version to the
  // actors' weight transport. Under LoRA (job.memory.lora) only the
  // adapters, with the frozen base's fingerprint (weightsync/fingerprint.h).
  [[nodiscard]] virtual absl::StatusOr<v1::WeightSyncStats> PublishWeights() = 0;

  // Writes the current weights as safetensors (atomically): plain Llama
  // weights, under LoRA with the adapters merged in.
  [[nodiscard]] virtual absl::Status SaveWeights(const std::string& path) = 0;

  // Writes a checkpoint of the learner into the existing directory `dir`:
  //   weights.safetensors    the policy (metadata: policy_version); under
  //                          LoRA the base and the adapters
  //   critic.safetensors     PPO: the critic (or the shared value head)
  //   optimizer.safetensors  every phase's optimizer state and step counts
  //                          (sft, rl, and PPO's separate critic; names of
  //                          learner/internal/adamw_state.h)
  // Each file is written atomically and fsynced.
  [[nodiscard]] virtual absl::Status SaveCheckpoint(const std::string& dir) = 0;

  // Restores what SaveCheckpoint wrote: weights, optimizer state, phase step
  // counts and the policy version. Fails, changing nothing, with DataLoss
  // for an unreadable file and FailedPrecondition for one that does not fit
  // this learner (other shapes, names or format, or under LoRA another
  // base); the message names the file and the tensor or field.
  [[nodiscard]] virtual absl::Status RestoreCheckpoint(const std::string& dir) = 0;

  // Starts at 0 and grows by one with every optimizer step.
  virtual int64_t policy_version() const = 0;

  // One optimizer step of the preference loss (job.dpo: DPO or IPO, beta)
  // over the batch's pairs, mean over pairs. The policy's log-probs are
  // summed over each response's tokens; micro-batches of
  // grpo.micro_batch_size pairs accumulate to the full-batch gradient.
  // InvalidArgument names a pair with an empty response or one that does
  // not fit the model.
  [[nodiscard]] virtual absl::StatusOr<v1::TrainStats> PreferenceStep(
      const v1::PreferenceBatch& batch) = 0;

  // Held-out measurements with the current weights, no update, no new
  // version: SftStep's loss (token mean over the targets) and exact match;
  // PreferenceStep's loss, reward margin and preference accuracy.
  [[nodiscard]] virtual absl::StatusOr<v1::TrainStats> EvalSft(const v1::SftBatch& batch) = 0;
  [[nodiscard]] virtual absl::StatusOr<v1::TrainStats> EvalPreference(
      const v1::PreferenceBatch& batch) = 0;
};

}  // namespace trellis::learner

#endif  // TRELLIS_LEARNER_LEARNER_WORKER_H_
