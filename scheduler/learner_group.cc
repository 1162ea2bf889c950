#include "scheduler/learner_group.h"

#include <thread>
#include <utility>

namespace trellis::scheduler {
namespace {

class LearnerGroup final : public learner::LearnerWorker {
 public:
  LearnerGroup(std::vector<std::unique_ptr<learner::LearnerWorker>> ranks, bool sharded)
      : ranks_(std::move(ranks)), sharded_(sharded) {}

  absl::StatusOr<v1::TrainStats> SftStep(const v1::SftBatch& batch) override {
    return OnAll([&](learner::LearnerWorker& w) { return w.SftStep(batch); });
  }
  absl::StatusOr<v1::TrainStats> TrainStep(const v1::TrainBatch& batch) override {
    return OnAll([&](learner::LearnerWorker& w) { return w.TrainStep(batch); });
  }
  absl::StatusOr<v1::TrainStats> PreferenceStep(const v1::PreferenceBatch& batch) override {
    return OnAll([&](learner::LearnerWorker& w) { return w.PreferenceStep(batch); });
  }
  absl::Status SaveCheckpoint(const std::string& dir) override {
    return OnAll([&](learner::LearnerWorker& w) { return w.SaveCheckpoint(dir); });
  }
  absl::Status RestoreCheckpoint(const std::string& dir) override {
    return OnAll([&](learner::LearnerWorker& w) { return w.RestoreCheckpoint(dir); });
  }

  absl::StatusOr<v1::WeightSyncStats> PublishWeights() override {
    return Reads([&](learner::LearnerWorker& w) { return w.PublishWeights(); });
  }
  absl::Status SaveWeights(const std::string& path) override {
    return Reads([&](learner::LearnerWorker& w) { return w.SaveWeights(path); });
  }
  int64_t policy_version() const override { return ranks_.front()->policy_version(); }
  absl::StatusOr<v1::TrainStats> EvalSft(const v1::SftBatch& batch) override {
    return Reads([&](learner::LearnerWorker& w) { return w.EvalSft(batch); });
  }
  absl::StatusOr<v1::TrainStats> EvalPreference(const v1::PreferenceBatch& batch) override {
    return Reads([&](learner::LearnerWorker& w) { return w.EvalPreference(batch); });
  }

 private:
  static const absl::Status& StatusOf(const absl::Status& s) { return s; }
  template <typename T>
  static const absl::Status& StatusOf(const absl::StatusOr<T>& s) {
    return s.status();
  }

  // call(rank) on every rank at once; rank 0's answer, or the first
  // failure in rank order.
  template <typename Call>
  auto OnAll(const Call& call) -> decltype(call(std::declval<learner::LearnerWorker&>())) {
    using Result = decltype(call(std::declval<learner::LearnerWorker&>()));
    std::vector<Result> results(ranks_.size(), Result(absl::UnknownError("not run")));
    std::vector<std::thread> threads;
    for (size_t r = 0; r < ranks_.size(); ++r) {
      threads.emplace_back([&, r] { results[r] = call(*ranks_[r]); });
    }
    for (std::thread& t : threads) t.join();
    for (const Result& result : results) {
      if (!result.ok()) return StatusOf(result);
    }
    return std::move(results.front());
  }

  // A call that reads the weights: every rank's when they are sharded,
  // else rank 0's alone.
  template <typename Call>
  auto Reads(const Call& call) -> decltype(call(std::declval<learner::LearnerWorker&>())) {
    return sharded_ ? OnAll(call) : call(*ranks_.front());
  }

  const std::vector<std::unique_ptr<learner::LearnerWorker>> ranks_;
  const bool sharded_;
};

}  // namespace

std::unique_ptr<learner::LearnerWorker> NewLearnerGroup(
    std::vector<std::unique_ptr<learner::LearnerWorker>> ranks, bool sharded) {
  return std::make_unique<LearnerGroup>(std::move(ranks), sharded);
}

}  // namespace trellis::scheduler
