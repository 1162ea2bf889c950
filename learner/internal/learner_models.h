#ifndef TRELLIS_LEARNER_INTERNAL_LEARNER_MODELS_H_
#define TRELLIS_LEARNER_INTERNAL_LEARNER_MODELS_H_

// The models a local learner trains, built under the job's memory
// strategies (job.memory): the policy (a scalar-head model for a reward
// model), PPO's critic (a separate model, or a value head on the policy's
// trunk), the fp32 master copies of bf16 training and LoRA's frozen base.
// Objectives compute their losses with these; the update engine steps them.

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "learner/internal/trainable.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "trellis/v1/job.pb.h"

namespace trellis::learner::internal {

class LearnerModels {
 public:
  // Builds the models of `job` (its model.init_checkpoint loaded, weights
  // seeded by `seed`, drawn on the host whatever the device, so every
  // device starts from the same weights), moves them to `device` and
  // applies job.memory. Errors name `worker_id`.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<LearnerModels>> Build(
      const v1::JobConfig& job, int64_t vocab_size, uint64_t seed, const std::string& worker_id,
      const torch::Device& device);

  model::Transformer& policy() { return policy_; }
  const model::Transformer& policy() const { return policy_; }
  // PPO with ppo.critic separate: the critic; else empty.
  model::Transformer& critic() { return critic_; }
  // PPO with ppo.critic shared: the value head on the policy's trunk; else
  // empty.
  torch::nn::Linear& value_head() { return value_head_; }
  bool has_critic() const { return !critic_.is_empty() || !value_head_.is_empty(); }

  // The master copies the optimizers step: null with precision fp32.
  MasterCopies* masters() { return bf16_ ? &masters_ : nullptr; }
  // Every master made so far (none with precision fp32).
  const MasterCopies& master_copies() const { return masters_; }
  // LoRA: weightsync::Fingerprint of the frozen base as built (it never
  // changes); 0 without LoRA.
  uint64_t base_fingerprint() const { return base_fingerprint_; }

  // The policy's weights that train: under LoRA (job.memory.lora) the
  // adapters, the base frozen; else every weight.
  model::NamedTensors TrainedWeights() const;
  std::vector<torch::Tensor> TrainedParams() const;
  // The critic's weights: the separate critic's (Llama names plus
  // "score"), or the shared trunk's value head ("value_head.weight").
  // REQUIRES: has_critic().
  model::NamedTensors CriticWeights() const;
  [[nodiscard]] absl::Status LoadCritic(const model::NamedTensors& weights);
  // `live` (model tensors) as a checkpoint keeps them: each replaced by
  // its fp32 master where it has one.
  model::NamedTensors WithMasters(model::NamedTensors live) const;
  // bf16: sets the masters of `live` to the checkpoint's fp32 `loaded`
  // (matched by name; LoadWeights checked them) and rounds them down.
  void LoadMasters(const model::NamedTensors& live, const model::NamedTensors& loaded);
  // Seconds the policy and the critic have spent recomputing checkpointed
  // blocks.
  double RecomputeSeconds() const;

 private:
  LearnerModels(const v1::JobConfig& job, model::Transformer policy);
  void BuildCritic(const v1::JobConfig& job, int64_t vocab_size);
  void MoveTo(const torch::Device& device);
  void ApplyMemory(const v1::MemoryConfig& memory);

  // memory.precision bf16: the models compute in bf16, masters_ hold fp32.
  const bool bf16_;
  const int64_t d_model_;
  model::Transformer policy_{nullptr};
  model::Transformer critic_{nullptr};
  torch::nn::Linear value_head_{nullptr};
  MasterCopies masters_;
  uint64_t base_fingerprint_ = 0;
};

}  // namespace trellis::learner::internal

#endif  // TRELLIS_LEARNER_INTERNAL_LEARNER_MODELS_H_
