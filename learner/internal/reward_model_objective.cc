// A reward model's Bradley-Terry loss: DPO's sigmoid loss with the model's
// sequence scores (its scalar head after the last response token) in place
// of the log-prob sums, no reference and beta 1.

#include <memory>

#include "learner/internal/preference_objective.h"

namespace trellis::learner::internal {
namespace {

class RewardModelObjective : public PreferenceObjective {
 public:
  explicit RewardModelObjective(const ObjectiveInput& in)
      : PreferenceObjective(in, v1::DpoConfig::SIGMOID, /*beta=*/1.0,
                            /*use_reference=*/false) {}

 protected:
  torch::Tensor Scores(const model::TokenBatch& tb) override {
    return model::SequenceScores(in_.models->policy(), tb);
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Objective>> NewRewardModelObjective(const ObjectiveInput& in) {
  auto objective = std::make_unique<RewardModelObjective>(in);
  if (absl::Status s = objective->Check(); !s.ok()) return s;
  return objective;
}

}  // namespace trellis::learner::internal
