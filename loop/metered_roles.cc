#include "loop/metered_roles.h"

#include <utility>

namespace trellis::loop {

absl::StatusOr<v1::TrainStats> MeteredLearner::Recorded(absl::StatusOr<v1::TrainStats> stats,
                                                        ledger::Stage stage) {
  if (stats.ok()) ledger_->RecordFlops(stage, stats->flops());
  return stats;
}

absl::StatusOr<v1::TrainStats> MeteredLearner::SftStep(const v1::SftBatch& batch) {
  return Recorded(inner_->SftStep(batch), ledger::Stage::kSft);
}

absl::StatusOr<v1::TrainStats> MeteredLearner::TrainStep(const v1::TrainBatch& batch) {
  return Recorded(inner_->TrainStep(batch), ledger::Stage::kUpdate);
}

absl::StatusOr<v1::TrainStats> MeteredLearner::PreferenceStep(const v1::PreferenceBatch& batch) {
  return Recorded(inner_->PreferenceStep(batch), ledger::Stage::kUpdate);
}

absl::StatusOr<v1::LogProbResponse> MeteredReference::LogProbs(const v1::LogProbRequest& request) {
  absl::StatusOr<v1::LogProbResponse> response = inner_->LogProbs(request);
  if (response.ok()) ledger_->RecordFlops(ledger::Stage::kReference, response->forward_flops());
  return response;
}

absl::StatusOr<v1::ScoreResponse> MeteredReference::Scores(const v1::LogProbRequest& request) {
  absl::StatusOr<v1::ScoreResponse> response = inner_->Scores(request);
  if (response.ok()) ledger_->RecordFlops(ledger::Stage::kReward, response->forward_flops());
  return response;
}

Roles Metered(Roles roles, ledger::Ledger* ledger, std::unique_ptr<MeteredLearner>& learner,
              std::unique_ptr<MeteredReference>& reference) {
  if (ledger == nullptr) return roles;
  if (roles.learner != nullptr) {
    learner = std::make_unique<MeteredLearner>(roles.learner, ledger);
    roles.learner = learner.get();
  }
  if (roles.reference != nullptr) {
    reference = std::make_unique<MeteredReference>(roles.reference, ledger);
    roles.reference = reference.get();
  }
  return roles;
}

}  // namespace trellis::loop
