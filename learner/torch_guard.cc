#include "learner/torch_guard.h"

#include <utility>

#include "model/torch_status.h"

namespace trellis::learner {
namespace {

class TorchGuardedLearner final : public LearnerWorker {
 public:
  TorchGuardedLearner(std::unique_ptr<LearnerWorker> inner, std::string worker_id)
      : inner_(std::move(inner)), edge_(std::move(worker_id)) {}

  absl::StatusOr<v1::TrainStats> SftStep(const v1::SftBatch& batch) override {
    return edge_.Call("SftStep", [&] { return inner_->SftStep(batch); });
  }
  absl::StatusOr<v1::TrainStats> TrainStep(const v1::TrainBatch& batch) override {
    return edge_.Call("TrainStep", [&] { return inner_->TrainStep(batch); });
  }
  absl::StatusOr<v1::WeightSyncStats> PublishWeights() override {
    return edge_.Call("PublishWeights", [&] { return inner_->PublishWeights(); });
  }
  absl::Status SaveWeights(const std::string& path) override {
    return edge_.Call("SaveWeights", [&] { return inner_->SaveWeights(path); });
  }
  absl::Status SaveCheckpoint(const std::string& dir) override {
    return edge_.Call("SaveCheckpoint", [&] { return inner_->SaveCheckpoint(dir); });
  }
  absl::Status RestoreCheckpoint(const std::string& dir) override {
    return edge_.Call("RestoreCheckpoint", [&] { return inner_->RestoreCheckpoint(dir); });
  }
  int64_t policy_version() const override { return inner_->policy_version(); }
  absl::StatusOr<v1::TrainStats> PreferenceStep(const v1::PreferenceBatch& batch) override {
    return edge_.Call("PreferenceStep", [&] { return inner_->PreferenceStep(batch); });
  }
  absl::StatusOr<v1::TrainStats> EvalSft(const v1::SftBatch& batch) override {
    return edge_.Call("EvalSft", [&] { return inner_->EvalSft(batch); });
  }
  absl::StatusOr<v1::TrainStats> EvalPreference(const v1::PreferenceBatch& batch) override {
    return edge_.Call("EvalPreference", [&] { return inner_->EvalPreference(batch); });
  }

 private:
  const std::unique_ptr<LearnerWorker> inner_;
  const model::TorchEdge edge_;
};

}  // namespace

std::unique_ptr<LearnerWorker> GuardTorchErrors(std::unique_ptr<LearnerWorker> inner,
                                                std::string worker_id) {
  return std::make_unique<TorchGuardedLearner>(std::move(inner), std::move(worker_id));
}

}  // namespace trellis::learner
