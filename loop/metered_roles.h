#ifndef TRELLIS_LOOP_METERED_ROLES_H_
#define TRELLIS_LOOP_METERED_ROLES_H_

// The learner and the reference report the arithmetic of each call in its
// answer (TrainStats.flops, LogProbResponse and ScoreResponse
// .forward_flops: config/flops.h, live tokens only). These wrappers record
// it in the run's ledger under the call's stage, so an embedded run and a
// launched one (whose roles compute in other processes) account the same
// work in the ledger the loop writes, as the actor's
// GenerateResponse.forward_flops is (loop/driver_rollout.cc).

#include <cstdint>
#include <memory>
#include <string>

#include "learner/learner_worker.h"
#include "ledger/ledger.h"
#include "loop/roles.h"
#include "reference/reference_worker.h"

namespace trellis::loop {

class MeteredLearner final : public learner::LearnerWorker {
 public:
  // REQUIRES: both outlive this.
  MeteredLearner(learner::LearnerWorker* inner, ledger::Ledger* ledger)
      : inner_(inner), ledger_(ledger) {}

  absl::StatusOr<v1::TrainStats> SftStep(const v1::SftBatch& batch) override;
  absl::StatusOr<v1::TrainStats> TrainStep(const v1::TrainBatch& batch) override;
  absl::StatusOr<v1::TrainStats> PreferenceStep(const v1::PreferenceBatch& batch) override;
  absl::StatusOr<v1::WeightSyncStats> PublishWeights() override { return inner_->PublishWeights(); }
  absl::Status SaveWeights(const std::string& path) override { return inner_->SaveWeights(path); }
  absl::Status SaveCheckpoint(const std::string& dir) override {
    return inner_->SaveCheckpoint(dir);
  }
  absl::Status RestoreCheckpoint(const std::string& dir) override {
    return inner_->RestoreCheckpoint(dir);
  }
  int64_t policy_version() const override { return inner_->policy_version(); }
  absl::StatusOr<v1::TrainStats> EvalSft(const v1::SftBatch& batch) override {
    return inner_->EvalSft(batch);
  }
  absl::StatusOr<v1::TrainStats> EvalPreference(const v1::PreferenceBatch& batch) override {
    return inner_->EvalPreference(batch);
  }

 private:
  absl::StatusOr<v1::TrainStats> Recorded(absl::StatusOr<v1::TrainStats> stats,
                                          ledger::Stage stage);

  learner::LearnerWorker* const inner_;
  ledger::Ledger* const ledger_;
};

class MeteredReference final : public reference::ReferenceWorker {
 public:
  // REQUIRES: both outlive this.
  MeteredReference(reference::ReferenceWorker* inner, ledger::Ledger* ledger)
      : inner_(inner), ledger_(ledger) {}

  absl::StatusOr<v1::LogProbResponse> LogProbs(const v1::LogProbRequest& request) override;
  absl::Status Load(const std::string& weights_path) override { return inner_->Load(weights_path); }
  absl::StatusOr<v1::ScoreResponse> Scores(const v1::LogProbRequest& request) override;

 private:
  reference::ReferenceWorker* const inner_;
  ledger::Ledger* const ledger_;
};

// `roles` with its learner and reference (where set) wrapped to record into
// `ledger` (where not null); the wrappers live in `learner` and `reference`.
Roles Metered(Roles roles, ledger::Ledger* ledger, std::unique_ptr<MeteredLearner>& learner,
              std::unique_ptr<MeteredReference>& reference);

}  // namespace trellis::loop

#endif  // TRELLIS_LOOP_METERED_ROLES_H_
