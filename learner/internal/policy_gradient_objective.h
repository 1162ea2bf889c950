#ifndef TRELLIS_LEARNER_INTERNAL_POLICY_GRADIENT_OBJECTIVE_H_
#define TRELLIS_LEARNER_INTERNAL_POLICY_GRADIENT_OBJECTIVE_H_

// The GRPO family's objective on a TrainBatch: the clipped surrogate
// (DAPO's asymmetric clip), the k3 KL penalty to the reference, token or
// sequence aggregation (ClippedPolicyLoss, objectives.h), with one
// advantage per sample. PPO (ppo_objective.cc) derives from it with
// per-token advantages and a value loss.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "learner/internal/objective.h"
#include "model/token_batch.h"

namespace trellis::learner::internal {

class PolicyGradientObjective : public Objective {
 public:
  // `kl_in_loss`: the KL penalty is in the loss (grpo.kl_coef > 0 and,
  // under PPO, ppo.kl_mode loss); `reads_reference`: the samples carry
  // reference log-probs (grpo.kl_coef > 0; never under distill).
  // REQUIRES: input.batch is a TrainBatch.
  PolicyGradientObjective(const ObjectiveInput& in, bool kl_in_loss, bool reads_reference);

  // InvalidArgument naming the first sample without response tokens or
  // whose old (and, with reads_reference, reference) log-probs or trained
  // flags do not match its response. Untrained tokens (TrainSample.trained)
  // are out of the mask, the loss and the token counts.
  [[nodiscard]] absl::Status Check();

  PhaseId phase() const override { return PhaseId::kRl; }
  int64_t rows() const override { return batch_.samples_size(); }
  absl::StatusOr<MicroResult> Loss(int64_t begin, int64_t end) override;

 protected:
  // Row i of the objective: the batch's samples in model::LengthOrder, so
  // that each micro-batch [begin, end) holds sequences of like length and
  // pads little.
  const v1::TrainSample& sample(int64_t i) const { return batch_.samples(order_[i]); }
  // Samples [begin, end) as a token batch.
  absl::StatusOr<model::TokenBatch> Tokens(int64_t begin, int64_t end) const;
  // The clipped surrogate and KL of samples [begin, end) in `tb`, given
  // their log-probs and advantages ([B], one per sample, or [B, T]).
  MicroResult PolicyTerm(const model::TokenBatch& tb, const torch::Tensor& logp,
                         const torch::Tensor& advantages, int64_t begin, int64_t end) const;
  double temperature() const { return in_.job->sampling().temperature(); }
  // The policy's log-probs of samples [begin, end) in `tb`, routed as the
  // job says (learner/internal/routing_replay.h); `routed` receives the
  // routing's part of the micro-batch, for AddRouting.
  absl::StatusOr<torch::Tensor> PolicyLogProbs(const model::TokenBatch& tb, int64_t begin,
                                               int64_t end, MicroResult* routed) const;

  const ObjectiveInput in_;
  const v1::TrainBatch& batch_;
  // Trained response tokens of the whole batch (set by Check).
  double total_tokens_ = 0;
  // The batch's sample indices by length (set by Check).
  std::vector<int64_t> order_;

 private:
  const bool kl_in_loss_;
  const bool reads_reference_;
};

}  // namespace trellis::learner::internal

#endif  // TRELLIS_LEARNER_INTERNAL_POLICY_GRADIENT_OBJECTIVE_H_
