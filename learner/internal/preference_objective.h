#ifndef TRELLIS_LEARNER_INTERNAL_PREFERENCE_OBJECTIVE_H_
#define TRELLIS_LEARNER_INTERNAL_PREFERENCE_OBJECTIVE_H_

// The preference loss on a PreferenceBatch (ComputePreferenceLoss,
// losses.h), mean over pairs: each micro-batch's chosen and rejected
// responses are the rows of one forward pass, each row scored by Scores.
// DPO and IPO (preference_objective.cc) score a row by its summed
// log-probs against the reference's; a reward model
// (reward_model_objective.cc) by its scalar head, with no reference.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "learner/internal/objective.h"
#include "learner/losses.h"
#include "model/token_batch.h"

namespace trellis::learner::internal {

class PreferenceObjective : public Objective {
 public:
  // `use_reference`: each pair's reference log-probs enter the loss (else
  // 0). REQUIRES: input.batch is a PreferenceBatch.
  PreferenceObjective(const ObjectiveInput& in, v1::DpoConfig::Loss kind, double beta,
                      bool use_reference);

  // InvalidArgument naming the first pair with an empty response.
  [[nodiscard]] absl::Status Check() const;

  PhaseId phase() const override { return PhaseId::kPreference; }
  int64_t rows() const override { return batch_.pairs_size(); }
  absl::StatusOr<MicroResult> Loss(int64_t begin, int64_t end) override;

 protected:
  // Each row's score, [rows]: DPO's log-probs summed over the response at
  // sampling.temperature (as the reference scores).
  virtual torch::Tensor Scores(const model::TokenBatch& tb);

  const ObjectiveInput in_;

 private:
  const v1::PreferenceBatch& batch_;
  const v1::DpoConfig::Loss kind_;
  const double beta_;
  const bool use_reference_;
};

}  // namespace trellis::learner::internal

#endif  // TRELLIS_LEARNER_INTERNAL_PREFERENCE_OBJECTIVE_H_
