#ifndef TRELLIS_LOOP_POLICY_GRADIENT_H_
#define TRELLIS_LOOP_POLICY_GRADIENT_H_

// The step the policy-gradient recipes share (grpo and its estimators,
// ppo; either with DAPO's dynamic sampling and overlong filtering,
// grpo.dapo):
//
//   rollout round(s) with streaming verification -> reference log-probs
//   (reference_use: the KL penalty, a distill teacher) -> Rewards -> drop
//   policy -> Advantages -> AssembleBatch (loop/batch.h) -> update
//
// A recipe brings its rewards and its advantages. Under job.async the
// sampling runs ahead of the update (Driver::TakeSamples).

#include <optional>
#include <string>
#include <vector>

#include "learner/advantages.h"
#include "loop/rollout_recipe.h"

namespace trellis::loop {

class PolicyGradientRecipe : public RolloutRecipe {
 public:
  using RolloutRecipe::RolloutRecipe;

  [[nodiscard]] absl::Status Step(int64_t step, ledger::StepCounts& counts) final;
  // The step's sampling: its first rollout round and, with DAPO's dynamic
  // sampling, the rounds after it (on the rollout pipeline's thread under
  // job.async).
  [[nodiscard]] absl::StatusOr<SampledStep> Sample(int64_t step);
  std::string Progress(int64_t step, const ledger::StepCounts& counts,
                       const ledger::StepMetrics& metrics) const final;

 protected:
  // What the reference's log-probs of a step's samples are for.
  enum class ReferenceUse {
    kNone,       // the step asks the reference nothing
    kKlPenalty,  // TrainSample.ref_logprobs: the KL penalty (grpo.kl_coef)
    kTeacher,    // TrainSample.teacher_logprobs: a distill teacher's
  };
  // kKlPenalty when grpo.kl_coef > 0 and the run has a reference, else
  // kNone.
  virtual ReferenceUse reference_use() const;
  // The reward each sample of `drawn` trains on: the verifier's.
  [[nodiscard]] virtual absl::StatusOr<std::vector<float>> Rewards(const StepSamples& drawn);
  // Per-sample advantages of `rewards` without the `dropped` samples (the
  // recipe may widen `dropped` to whole groups); nullopt when the learner
  // computes its own from the rewards. Those of grpo.advantage_estimator
  // (GRPO's group-normalized rewards, RLOO, REINFORCE++) by default.
  [[nodiscard]] virtual absl::StatusOr<std::optional<learner::GroupAdvantages>> Advantages(
      const std::vector<float>& rewards, std::vector<bool>& dropped) const;
};

}  // namespace trellis::loop

#endif  // TRELLIS_LOOP_POLICY_GRADIENT_H_
