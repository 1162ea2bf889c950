#ifndef TRELLIS_LEARNER_INTERNAL_LOCAL_LEARNER_H_
#define TRELLIS_LEARNER_INTERNAL_LOCAL_LEARNER_H_

// The in-process learner behind NewLocalLearner (learner/local_learner.h):
// a thin dispatcher from the LearnerWorker calls to an objective
// (objective.h, chosen from the registry by the call's batch and the job's
// recipe) and the update engine that steps it (update_engine.h). Its
// methods live in two files:
//   learner/local_learner.cc               building, the steps, publishing
//   learner/internal/learner_checkpoint.cc checkpoint save and restore

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "learner/internal/learner_models.h"
#include "learner/internal/objective.h"
#include "learner/internal/update_engine.h"
#include "learner/learner_worker.h"
#include "learner/local_learner.h"
#include "ledger/ledger.h"
#include "model/safetensors.h"
#include "trellis/v1/job.pb.h"
#include "weightsync/transport.h"

namespace trellis::learner::internal {

class LocalLearner : public LearnerWorker {
 public:
  LocalLearner(const v1::JobConfig& job, const LocalLearnerOptions& options,
               weightsync::Publisher* transport, ledger::Ledger* ledger);

  // Builds the models (and loads model.init_checkpoint), joins the learner
  // group and registers the built-in objectives.
  absl::Status Init();

  absl::StatusOr<v1::TrainStats> SftStep(const v1::SftBatch& batch) override;
  absl::StatusOr<v1::TrainStats> TrainStep(const v1::TrainBatch& batch) override;
  absl::StatusOr<v1::WeightSyncStats> PublishWeights() override;
  absl::Status SaveWeights(const std::string& path) override;
  absl::Status SaveCheckpoint(const std::string& dir) override;
  absl::Status RestoreCheckpoint(const std::string& dir) override;
  int64_t policy_version() const override { return engine_->version(); }
  absl::StatusOr<v1::TrainStats> PreferenceStep(const v1::PreferenceBatch& batch) override;
  absl::StatusOr<v1::TrainStats> EvalSft(const v1::SftBatch& batch) override;
  absl::StatusOr<v1::TrainStats> EvalPreference(const v1::PreferenceBatch& batch) override;

 private:
  // --- local_learner.cc.
  // The job's objective for `batch`.
  absl::StatusOr<std::unique_ptr<Objective>> NewObjective(BatchRef batch);
  // One optimizer step of that objective; its measurement without one.
  absl::StatusOr<v1::TrainStats> Train(BatchRef batch);
  absl::StatusOr<v1::TrainStats> Evaluate(BatchRef batch);
  // Flat shards, the export path: every unit gathered in turn (a
  // collective), `fn` given each of its tensors (under LoRA a block's
  // merged with its adapters), valid during the call only.
  absl::Status ForEachGathered(
      const std::function<absl::Status(const std::string&, const torch::Tensor&)>& fn);

  // --- learner_checkpoint.cc.
  absl::Status SaveNamed(const std::string& path, const model::NamedTensors& named);
  // LoRA: FailedPrecondition unless the base in `weights` (a checkpoint's,
  // read from `path`) is the one this learner built.
  absl::Status CheckSameBase(const model::NamedTensors& weights, const std::string& path) const;
  // Flat shards (memory.zero_stage 2, 3): this rank's masters, and rank 0
  // the index; restored by any rank count (sharded_checkpoint.h).
  absl::Status SaveShards(const std::string& dir);
  // This rank's `masters` as FlatShards::LoadMasters takes them, and
  // `state` (its optimizer file's tensors) resharded when the checkpoint's
  // rank count differs. Changes nothing live.
  absl::Status RestoreShards(const std::string& dir, int saved_ranks,
                             std::map<std::string, torch::Tensor>* state,
                             std::vector<torch::Tensor>* masters);

  const v1::JobConfig job_;
  const LocalLearnerOptions options_;
  weightsync::Publisher* transport_;
  ledger::Ledger* ledger_;
  ObjectiveRegistry objectives_;
  std::unique_ptr<LearnerModels> models_;
  std::unique_ptr<UpdateEngine> engine_;
};

}  // namespace trellis::learner::internal

#endif  // TRELLIS_LEARNER_INTERNAL_LOCAL_LEARNER_H_
