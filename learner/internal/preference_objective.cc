#include "learner/internal/preference_objective.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"

namespace trellis::learner::internal {

PreferenceObjective::PreferenceObjective(const ObjectiveInput& in, v1::DpoConfig::Loss kind,
                                         double beta, bool use_reference)
    : in_(in),
      batch_(*std::get<const v1::PreferenceBatch*>(in.batch)),
      kind_(kind),
      beta_(beta),
      use_reference_(use_reference) {}

absl::Status PreferenceObjective::Check() const {
  for (int i = 0; i < batch_.pairs_size(); ++i) {
    const v1::PreferencePair& p = batch_.pairs(i);
    if (p.chosen_tokens().empty() || p.rejected_tokens().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          in_.worker_id, ": preference pair ", i, " has ", p.chosen_tokens_size(), " chosen and ",
          p.rejected_tokens_size(), " rejected response tokens; expected both non-empty"));
    }
  }
  return absl::OkStatus();
}

torch::Tensor PreferenceObjective::Scores(const model::TokenBatch& tb) {
  return model::TargetLogProbs(in_.models->policy(), tb, in_.job->sampling().temperature()).sum(1);
}

absl::StatusOr<MicroResult> PreferenceObjective::Loss(int64_t begin, int64_t end) {
  const int64_t n = end - begin;
  std::vector<model::SequencePair> rows;
  std::vector<double> ref_chosen, ref_rejected;
  for (int64_t i = begin; i < end; ++i) {
    const v1::PreferencePair& p = batch_.pairs(i);
    rows.push_back({p.prompt_tokens(), p.chosen_tokens()});
    ref_chosen.push_back(use_reference_ ? p.ref_chosen_logprob() : 0.0);
    ref_rejected.push_back(use_reference_ ? p.ref_rejected_logprob() : 0.0);
  }
  for (int64_t i = begin; i < end; ++i) {
    rows.push_back({batch_.pairs(i).prompt_tokens(), batch_.pairs(i).rejected_tokens()});
  }
  absl::StatusOr<model::TokenBatch> tb = in_.Tokens(rows);
  if (!tb.ok()) return tb.status();
  const torch::Tensor sums = Scores(*tb);
  const double normalizer = std::max(1, batch_.pairs_size());
  PreferenceLoss loss =
      ComputePreferenceLoss(sums.slice(0, 0, n), sums.slice(0, n, 2 * n), torch::tensor(ref_chosen),
                            torch::tensor(ref_rejected), beta_, kind_, normalizer);
  MicroResult r;
  r.loss = loss.loss;
  r.tokens = tb->response_mask.sum().item<double>();
  r.margin_sum = loss.margin_sum;
  r.ranked_right = loss.ranked_right;
  r.chosen_reward_sum = loss.chosen_reward_sum;
  r.rejected_reward_sum = loss.rejected_reward_sum;
  return r;
}

// DPO or IPO (job.dpo: loss, beta) against the reference's log-probs.
absl::StatusOr<std::unique_ptr<Objective>> NewPreferenceObjective(const ObjectiveInput& in) {
  const v1::DpoConfig& dpo = in.job->dpo();
  auto objective = std::make_unique<PreferenceObjective>(in, dpo.loss(), dpo.beta(),
                                                         /*use_reference=*/true);
  if (absl::Status s = objective->Check(); !s.ok()) return s;
  return objective;
}

}  // namespace trellis::learner::internal
