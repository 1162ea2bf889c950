#include "learner/internal/policy_gradient_objective.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "learner/internal/routing_replay.h"
#include "learner/objectives.h"

namespace trellis::learner::internal {

PolicyGradientObjective::PolicyGradientObjective(const ObjectiveInput& in, bool kl_in_loss,
                                                 bool reads_reference)
    : in_(in),
      batch_(*std::get<const v1::TrainBatch*>(in.batch)),
      kl_in_loss_(kl_in_loss),
      reads_reference_(reads_reference) {}

absl::Status PolicyGradientObjective::Check() {
  for (int i = 0; i < batch_.samples_size(); ++i) {
    const v1::TrainSample& s = batch_.samples(i);
    const int n = s.response_tokens_size();
    if (n == 0 || s.old_logprobs_size() != n || (reads_reference_ && s.ref_logprobs_size() != n)) {
      return absl::InvalidArgumentError(
          absl::StrCat(in_.worker_id, ": train sample ", i, " has ", n, " response tokens, ",
                       s.old_logprobs_size(), " old log-probs and ", s.ref_logprobs_size(),
                       " reference log-probs; expected equal, non-zero",
                       reads_reference_ ? "" : " (reference log-probs may be empty here)"));
    }
    if (!s.trained().empty() && s.trained_size() != n) {
      return absl::InvalidArgumentError(absl::StrCat(in_.worker_id, ": train sample ", i, " has ",
                                                     n, " response tokens and ", s.trained_size(),
                                                     " trained flags; expected equal or none"));
    }
    // Only trained tokens count (a multi-turn sample's environment tokens
    // are in the sequence, not in the loss).
    total_tokens_ +=
        s.trained().empty() ? n : std::count(s.trained().begin(), s.trained().end(), true);
  }
  std::vector<model::SequencePair> pairs;
  pairs.reserve(batch_.samples_size());
  for (const v1::TrainSample& s : batch_.samples()) {
    pairs.push_back({s.prompt_tokens(), s.response_tokens()});
  }
  order_ = model::LengthOrder(pairs);
  return absl::OkStatus();
}

absl::StatusOr<model::TokenBatch> PolicyGradientObjective::Tokens(int64_t begin,
                                                                  int64_t end) const {
  std::vector<model::SequencePair> pairs;
  for (int64_t i = begin; i < end; ++i) {
    pairs.push_back({sample(i).prompt_tokens(), sample(i).response_tokens(), sample(i).trained()});
  }
  return in_.Tokens(pairs);
}

absl::StatusOr<MicroResult> PolicyGradientObjective::Loss(int64_t begin, int64_t end) {
  absl::StatusOr<model::TokenBatch> tb = Tokens(begin, end);
  if (!tb.ok()) return tb.status();
  std::vector<float> advantages;
  for (int64_t i = begin; i < end; ++i) advantages.push_back(sample(i).advantage());
  MicroResult routed;
  absl::StatusOr<torch::Tensor> logp = PolicyLogProbs(*tb, begin, end, &routed);
  if (!logp.ok()) return logp.status();
  MicroResult out =
      PolicyTerm(*tb, *logp, torch::tensor(advantages, torch::kFloat32), begin, end);
  AddRouting(routed, &out);
  return out;
}

absl::StatusOr<torch::Tensor> PolicyGradientObjective::PolicyLogProbs(const model::TokenBatch& tb,
                                                                      int64_t begin, int64_t end,
                                                                      MicroResult* routed) const {
  std::vector<const v1::TrainSample*> samples;
  std::vector<int64_t> ids;
  for (int64_t i = begin; i < end; ++i) {
    samples.push_back(&sample(i));
    ids.push_back(order_[i]);
  }
  return RoutedLogProbs(in_, tb, samples, ids, temperature(),
                        static_cast<double>(end - begin) / static_cast<double>(rows()), routed);
}

MicroResult PolicyGradientObjective::PolicyTerm(const model::TokenBatch& tb,
                                                const torch::Tensor& logp,
                                                const torch::Tensor& advantages, int64_t begin,
                                                int64_t end) const {
  const auto& grpo = in_.job->grpo();
  std::vector<absl::Span<const float>> old_rows, ref_rows;
  for (int64_t i = begin; i < end; ++i) {
    old_rows.emplace_back(sample(i).old_logprobs());
    ref_rows.emplace_back(sample(i).ref_logprobs());
  }
  const torch::Tensor old_logp = model::PlaceResponseValues(old_rows, tb);
  const torch::Tensor ref_logp =
      kl_in_loss_ ? model::PlaceResponseValues(ref_rows, tb) : torch::Tensor();
  // grpo.dapo.clip_eps_{low,high}: 0 takes grpo.clip_eps.
  const double clip_low =
      grpo.dapo().clip_eps_low() > 0 ? grpo.dapo().clip_eps_low() : grpo.clip_eps();
  const double clip_high =
      grpo.dapo().clip_eps_high() > 0 ? grpo.dapo().clip_eps_high() : grpo.clip_eps();
  const double normalizer =
      LossNormalizer(grpo.loss_aggregation(), total_tokens_, batch_.samples_size());
  // The asynchronous pipeline's samples may be stale: decoupled PPO.
  const v1::AsyncConfig& async = in_.job->async();
  std::optional<DecoupledTerms> decoupled;
  if (async.enabled() && async.max_staleness() > 0) {
    decoupled = DecoupledWeights(logp, old_logp, tb.response_mask, async.importance_weight_cap());
  }
  PolicyLoss loss = ClippedPolicyLoss(logp, decoupled ? decoupled->proximal : old_logp, ref_logp,
                                      advantages, tb.response_mask, clip_low, clip_high,
                                      kl_in_loss_ ? grpo.kl_coef() : 0, grpo.loss_aggregation(),
                                      normalizer, decoupled ? decoupled->weights : torch::Tensor());
  MicroResult out{loss.loss, loss.kl_sum, loss.clipped_tokens, loss.tokens};
  if (decoupled) {
    out.logprob_gap_sum = decoupled->gap_sum;
    out.weights_truncated = decoupled->truncated_tokens;
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Objective>> NewPolicyGradientObjective(const ObjectiveInput& in) {
  const bool kl = in.job->grpo().kl_coef() > 0;
  auto objective = std::make_unique<PolicyGradientObjective>(in, kl, kl);
  if (absl::Status s = objective->Check(); !s.ok()) return s;
  return objective;
}

}  // namespace trellis::learner::internal
