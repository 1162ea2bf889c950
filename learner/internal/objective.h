#ifndef TRELLIS_LEARNER_INTERNAL_OBJECTIVE_H_
#define TRELLIS_LEARNER_INTERNAL_OBJECTIVE_H_

// A training objective: the loss of one call's batch, micro-batch by
// micro-batch, which the update engine (update_engine.h) drives through
// micro-batching, gradient accumulation, the memory strategies and the
// optimizer step. Objectives are registered by a typed key (the batch kind
// and the recipe); the built-ins, one file each, in builtin_objectives.cc:
//   sft_objective.cc              SFT cross-entropy
//   policy_gradient_objective.cc  the GRPO family's clipped surrogate, KL
//   ppo_objective.cc              PPO: GAE from rewards, critic value loss
//   distill_objective.cc          distill: per-token advantages from the
//                                 divergence to a teacher
//   preference_objective.cc       DPO / IPO on preference pairs
//   reward_model_objective.cc     a reward model's Bradley-Terry loss
// A new recipe adds its objective's file and one registration line there.

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "config/recipe.h"
#include "learner/internal/learner_models.h"
#include "model/token_batch.h"
#include "trellis/v1/job.pb.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::learner::internal {

class UpdateEngine;

// The optimizer phases of a learner, each with its own optimizer state and
// step count (phases.h; PhaseName's table follows this order).
enum class PhaseId { kSft, kRl, kCritic, kPreference };
inline constexpr int kPhaseCount = 4;

// The batch of one LearnerWorker call; BatchKind is its index.
enum class BatchKind { kSft, kTrain, kPreference };
using BatchRef =
    std::variant<const v1::SftBatch*, const v1::TrainBatch*, const v1::PreferenceBatch*>;
BatchKind KindOf(const BatchRef& batch);

// What one micro-batch contributes to a step: the loss to backpropagate
// and sums (over the micro-batch, not normalized) for the step's stats.
struct MicroResult {
  torch::Tensor loss;
  double kl_sum = 0;
  double clipped_tokens = 0;
  double tokens = 0;
  // Rows whose every target token is the model's argmax (SFT only).
  double exact_rows = 0;
  // PPO: the value loss in `loss` (a shared critic's share, or a separate
  // critic's whole loss) and the tokens whose value was clipped.
  double value_loss = 0;
  double value_clipped = 0;
  // Distill: the teacher divergence's sum over the trained tokens.
  double teacher_divergence_sum = 0;
  // Decoupled PPO (job.async): DecoupledTerms' sums.
  double logprob_gap_sum = 0;
  double weights_truncated = 0;
  // Mixture-of-experts policies (learner/internal/routing_replay.h): the
  // load-balancing loss (unweighted) and, with grpo.routing_replay, the
  // positions whose own experts differ from the record's in some layer
  // and those compared, the records' bytes, and the sums over trained
  // tokens of |behaviour - logp| with the replayed and with the own routing.
  double router_aux_loss_sum = 0;
  double routing_differing = 0;
  double routing_compared = 0;
  double routing_record_bytes = 0;
  double logprob_gap_replayed_sum = 0;
  double logprob_gap_own_sum = 0;
  // Preference pairs only: PreferenceLoss's sums.
  double margin_sum = 0;
  double ranked_right = 0;
  double chosen_reward_sum = 0;
  double rejected_reward_sum = 0;
};
using MicroFn = std::function<absl::StatusOr<MicroResult>(int64_t begin, int64_t end)>;

// What an objective is built from: the call's batch and the learner's
// models. The job, the models and the batch outlive the objective.
struct ObjectiveInput {
  const v1::JobConfig* job = nullptr;
  LearnerModels* models = nullptr;
  // Names the objective's errors ("learner-0").
  std::string worker_id;
  int32_t pad_id = 0;
  BatchRef batch;

  // `pairs` as a padded token batch (model.max_seq_len).
  absl::StatusOr<model::TokenBatch> Tokens(const std::vector<model::SequencePair>& pairs) const;
};

class Objective {
 public:
  virtual ~Objective() = default;
  // The optimizer phase its update steps.
  virtual PhaseId phase() const = 0;
  // The batch's rows (samples or pairs), which micro-batches split.
  virtual int64_t rows() const = 0;
  // The loss of rows [begin, end): a sum over them divided by a normalizer
  // of the whole batch, so that the micro-batches' gradients add up to the
  // batch's whatever the split.
  [[nodiscard]] virtual absl::StatusOr<MicroResult> Loss(int64_t begin, int64_t end) = 0;
  // After phase()'s update, before the new version: what else the step
  // trains (through engine.Update) and the stats that adds. None by default.
  [[nodiscard]] virtual absl::Status Complete(UpdateEngine& engine, v1::TrainStats* stats);
  // The rollout buffer the update trained on (the ledger's rollout-buffer
  // object); 0 when it kept none.
  virtual int64_t buffer_bytes() const { return 0; }
};

// Builds an objective for `input`'s batch: InvalidArgument naming the row
// of a batch it cannot train on.
using ObjectiveFactoryFn = absl::StatusOr<std::unique_ptr<Objective>>(const ObjectiveInput& input);
using ObjectiveFactory = std::function<ObjectiveFactoryFn>;

// Which objective trains a batch kind: under one recipe, or (nullopt)
// under every recipe that registers none of its own for that kind.
struct ObjectiveKey {
  BatchKind batch;
  std::optional<config::Recipe> recipe;
};

class ObjectiveRegistry {
 public:
  // AlreadyExists when `key` is registered.
  [[nodiscard]] absl::Status Register(ObjectiveKey key, ObjectiveFactory factory);
  // The objective `recipe` trains input.batch with: its own, else every
  // recipe's (a plug-in recipe that config::Recipe does not name, nullopt,
  // gets every recipe's); NotFound naming the batch kind and the recipe when
  // neither is registered.
  [[nodiscard]] absl::StatusOr<std::unique_ptr<Objective>> New(
      std::optional<config::Recipe> recipe, const ObjectiveInput& input) const;

 private:
  std::map<std::pair<BatchKind, std::optional<config::Recipe>>, ObjectiveFactory> factories_;
};

// Registers the built-in objectives, one line each (builtin_objectives.cc).
[[nodiscard]] absl::Status RegisterBuiltinObjectives(ObjectiveRegistry& registry);

// `status` of rows [begin, end) of a batch, named with `worker_id`.
absl::Status AtRows(const absl::Status& status, const std::string& worker_id, int64_t begin,
                    int64_t end);

// Rows per micro-batch (grpo.micro_batch_size, at least 1).
int64_t MicroBatchRows(const v1::JobConfig& job);

}  // namespace trellis::learner::internal

#endif  // TRELLIS_LEARNER_INTERNAL_OBJECTIVE_H_
