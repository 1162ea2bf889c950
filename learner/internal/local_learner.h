#ifndef TRELLIS_LEARNER_INTERNAL_LOCAL_LEARNER_H_
#define TRELLIS_LEARNER_INTERNAL_LOCAL_LEARNER_H_

// The in-process learner behind NewLocalLearner (learner/local_learner.h).
// Its methods live in three files:
//   learner/local_learner.cc               the steps: micro-batches, the
//                                          update, memory strategies, ledger
//   learner/ppo_critic.cc                  PPO's critic, GAE targets and
//                                          value loss
//   learner/internal/learner_checkpoint.cc checkpoint save and restore

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "learner/internal/data_parallel.h"
#include "learner/internal/trainable.h"
#include "learner/learner_worker.h"
#include "learner/local_learner.h"
#include "ledger/ledger.h"
#include "model/safetensors.h"
#include "model/token_batch.h"
#include "model/transformer.h"
#include "trellis/v1/job.pb.h"
#include "weightsync/transport.h"

namespace trellis::learner::internal {

// What one micro-batch contributes to a step.
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
  // Preference pairs only: PreferenceLoss's sums.
  double margin_sum = 0;
  double ranked_right = 0;
  double chosen_reward_sum = 0;
  double rejected_reward_sum = 0;
};
using MicroFn = std::function<absl::StatusOr<MicroResult>(int64_t begin, int64_t end)>;

// A step's sums over its micro-batches, and the stats they give.
struct MicroSums {
  double loss = 0, kl = 0, clipped = 0, tokens = 0, exact_rows = 0;
  double value_loss = 0, value_clipped = 0;
  double margin = 0, ranked_right = 0, chosen_reward = 0, rejected_reward = 0;
  int32_t micro_batches = 0;

  void Add(const MicroResult& r);
  // Every rank's sums added up: the whole batch's.
  [[nodiscard]] absl::Status SumOver(DataParallelGroup& group);
  // `rows`: the batch's rows (pairs for a preference batch).
  void Fill(int64_t rows, v1::TrainStats* stats) const;
};

// One training phase's optimizer, the tensors it updates, and how many
// steps it has taken.
struct Phase {
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  TrainableSet params;
  int64_t steps = 0;
};

// PPO's per-token targets for every sample of a batch (the rollout buffer
// the update trains on), computed before the update.
struct PpoTargets {
  std::vector<std::vector<float>> advantages;
  std::vector<std::vector<float>> returns;
  std::vector<std::vector<float>> values;
  // Sum over response tokens of log pi_old - log pi_ref (kl_mode reward).
  double kl_sum = 0;
};

class LocalLearner : public LearnerWorker {
 public:
  LocalLearner(const v1::JobConfig& job, const LocalLearnerOptions& options,
               weightsync::Publisher* transport, ledger::Ledger* ledger);

  // Builds the models (and loads model.init_checkpoint).
  absl::Status Init();

  absl::StatusOr<v1::TrainStats> SftStep(const v1::SftBatch& batch) override;
  absl::StatusOr<v1::TrainStats> TrainStep(const v1::TrainBatch& batch) override;
  absl::StatusOr<v1::WeightSyncStats> PublishWeights() override;
  absl::Status SaveWeights(const std::string& path) override;
  absl::Status SaveCheckpoint(const std::string& dir) override;
  absl::Status RestoreCheckpoint(const std::string& dir) override;
  int64_t policy_version() const override { return version_; }
  absl::StatusOr<v1::TrainStats> PreferenceStep(const v1::PreferenceBatch& batch) override;
  absl::StatusOr<v1::TrainStats> EvalSft(const v1::SftBatch& batch) override;
  absl::StatusOr<v1::TrainStats> EvalPreference(const v1::PreferenceBatch& batch) override;

 private:
  // The highest live bytes of the Updates since the last Finish and what it
  // held beyond what was live before: the forward's saved activations and
  // the scratch of the backward or optimizer step (workspace). Memory an
  // update leaves behind (the first step's gradients and optimizer state)
  // is not workspace.
  struct UpdatePeak {
    int64_t bytes = 0;
    int64_t workspace = 0;
    // bf16: the model's own gradients, alive from backward until they are
    // copied up into the masters' (counted as gradients at the peak).
    int64_t model_gradients = 0;
    // `peak` seen in a window that opened at `base` live bytes, holding
    // `saved` activations; `after`: live bytes once the window's work ended.
    void Observe(int64_t peak, int64_t base, int64_t saved, int64_t after);
  };

  // --- local_learner.cc: steps and updates.
  // Builds the phase's optimizer over `params` on first use (over this
  // rank's share of them with memory.zero_stage 1).
  void EnsureOptimizer(Phase& phase, std::vector<torch::Tensor> params,
                       const v1::OptimizerConfig& config);
  // Cross-entropy on the target tokens, token mean over the whole batch.
  MicroFn SftMicro(const v1::SftBatch& batch);
  // The preference loss (job.dpo, or Bradley-Terry for a reward model)
  // over pairs [begin, end).
  absl::StatusOr<MicroFn> PreferenceMicro(const v1::PreferenceBatch& batch);
  // micro(begin, end), its failure named with this worker and the rows.
  absl::StatusOr<MicroResult> RunMicro(const MicroFn& micro, int64_t begin, int64_t end);
  // The micro-batches' forward passes without gradients.
  absl::StatusOr<v1::TrainStats> Measure(int64_t rows, const MicroFn& micro);
  // zero_grad; the forward and backward of this rank's micro-batches;
  // gradients to the optimizer's tensors, summed over the group, and
  // clipping; warm-up; step; parameters from their owners.
  absl::StatusOr<v1::TrainStats> Update(Phase& phase, const v1::OptimizerConfig& config,
                                        int64_t rows, const MicroFn& micro);
  // After a policy update: the new version, and the learner's resident
  // objects in `stats` and the ledger (`buffer_bytes`: the rollout buffer
  // the update trained on, 0 when it kept none).
  v1::TrainStats Finish(Phase& phase, ledger::Stage stage, v1::TrainStats stats,
                        int64_t buffer_bytes);
  // Seconds the policy and the critic have spent recomputing checkpointed
  // blocks.
  double RecomputeSeconds() const;
  // The master copies for the optimizers (null with precision fp32).
  MasterCopies* masters() { return bf16_ ? &masters_ : nullptr; }
  // The policy's weights that train: under LoRA (job.memory.lora) the
  // adapters, the base frozen; else every weight.
  model::NamedTensors TrainedWeights() const;
  std::vector<torch::Tensor> TrainedParams() const;

  // --- ppo_critic.cc: PPO's critic.
  bool HasCritic() const { return !critic_.is_empty() || !value_head_.is_empty(); }
  // Before the update: the critic's values, each token's reward, GAE, and
  // the batch-whitened advantages.
  absl::StatusOr<PpoTargets> ComputePpoTargets(const v1::TrainBatch& batch);
  // PPO's clipped value loss of rows [begin, end) (token mean over the
  // batch's `total_tokens`), as a micro-batch result.
  MicroResult ValueLoss(const torch::Tensor& values, const model::TokenBatch& tb,
                        const PpoTargets& targets, int64_t begin, int64_t end,
                        double total_tokens) const;
  // The critic's current values of the rows' response tokens, [B, T].
  torch::Tensor CriticValues(const model::TokenBatch& tb);
  // The shared value head's values of `hidden`, float32, masked to the
  // response tokens.
  torch::Tensor HeadValues(const torch::Tensor& hidden, const model::TokenBatch& tb);
  // The critic's weights: the separate critic's (Llama names plus "score"),
  // or the shared trunk's value head ("value_head.weight").
  model::NamedTensors CriticWeights() const;
  absl::Status LoadCritic(const model::NamedTensors& weights);
  // What the critic holds: weights and gradients, and the separate
  // critic's optimizer state (a shared value head's is in the policy's).
  int64_t CriticBytes();
  absl::StatusOr<model::TokenBatch> SampleBatch(const v1::TrainBatch& batch, int64_t begin,
                                                int64_t end) const;

  // --- learner_checkpoint.cc: checkpoints.
  // The optimizer phases a checkpoint holds, under their names.
  std::vector<std::pair<Phase*, std::string>> Phases();
  Phase* PhaseNamed(const std::string& name);
  std::vector<torch::Tensor> PhaseParams(const std::string& name);
  const v1::OptimizerConfig& PhaseConfig(const std::string& name) const;
  // `live` (model tensors) as a checkpoint keeps them: each replaced by
  // its fp32 master where it has one.
  model::NamedTensors WithMasters(model::NamedTensors live) const;
  // bf16: sets the masters of `live` to the checkpoint's fp32 `loaded`
  // (matched by name; LoadWeights checked them) and rounds them down.
  void LoadMasters(const model::NamedTensors& live, const model::NamedTensors& loaded);
  absl::Status SaveNamed(const std::string& path, const model::NamedTensors& named);
  // LoRA: FailedPrecondition unless the base in `weights` (a checkpoint's,
  // read from `path`) is the one this learner built.
  absl::Status CheckSameBase(const model::NamedTensors& weights, const std::string& path) const;

  const v1::JobConfig job_;
  // algorithm "reward_model": model_ has a scalar head.
  const bool reward_model_;
  // memory.precision bf16: the models compute in bf16, masters_ hold fp32.
  const bool bf16_;
  const LocalLearnerOptions options_;
  UpdatePeak peak_;
  weightsync::Publisher* transport_;
  ledger::Ledger* ledger_;
  model::Transformer model_{nullptr};
  // PPO: a separate critic, or a value head on the policy's trunk.
  model::Transformer critic_{nullptr};
  torch::nn::Linear value_head_{nullptr};
  MasterCopies masters_;
  // LoRA: weightsync::Fingerprint of the frozen base as built (it never
  // changes), published beside the adapters; 0 without LoRA.
  uint64_t base_fingerprint_ = 0;
  Phase sft_;
  Phase rl_;
  Phase critic_phase_;
  // Preference steps (dpo, online_dpo), with dpo.optimizer; not in
  // checkpoints (config refuses checkpoint_every for those recipes).
  Phase pref_;
  int64_t version_ = 0;
  // The learners this one trains with (a group of one by default).
  std::unique_ptr<DataParallelGroup> group_;
};

// Rows [begin, end) of per-sample vectors.
std::vector<absl::Span<const float>> Rows(const std::vector<std::vector<float>>& rows,
                                          int64_t begin, int64_t end);

}  // namespace trellis::learner::internal

#endif  // TRELLIS_LEARNER_INTERNAL_LOCAL_LEARNER_H_
