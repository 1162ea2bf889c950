// PPO on a TrainBatch whose samples carry rewards: before the update the
// critic values the responses and GAE gives per-token advantages and
// returns (the rollout buffer); the policy's clipped surrogate then trains
// on them, and the critic on its clipped value loss: with ppo.critic
// shared in the same step (vf_coef times the value loss), with a separate
// critic in a step of its own phase.

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "learner/internal/policy_gradient_objective.h"
#include "learner/internal/update_engine.h"
#include "learner/losses.h"

namespace trellis::learner::internal {
namespace {

// job.ppo.kl_mode, read here only: the KL to the reference is a per-token
// reward penalty (reward) instead of a loss term (loss).
bool KlInReward(const v1::JobConfig& job) { return job.ppo().kl_mode() == v1::PpoConfig::REWARD; }

// Rows [begin, end) of per-sample vectors.
std::vector<absl::Span<const float>> Rows(const std::vector<std::vector<float>>& rows,
                                          int64_t begin, int64_t end) {
  return std::vector<absl::Span<const float>>(rows.begin() + begin, rows.begin() + end);
}

class PpoObjective : public PolicyGradientObjective {
 public:
  explicit PpoObjective(const ObjectiveInput& in)
      : PolicyGradientObjective(in, in.job->grpo().kl_coef() > 0 && !KlInReward(*in.job),
                                in.job->grpo().kl_coef() > 0) {}

  // The critic's values, each token's reward, GAE, and the batch-whitened
  // advantages.
  absl::Status ComputeTargets();

  absl::StatusOr<MicroResult> Loss(int64_t begin, int64_t end) override;
  absl::Status Complete(UpdateEngine& engine, v1::TrainStats* stats) override;
  int64_t buffer_bytes() const override {
    return static_cast<int64_t>(batch_.ByteSizeLong()) +
           3 * static_cast<int64_t>(sizeof(float) * total_tokens_);
  }

 private:
  // The shared value head's values of `hidden`, float32, masked to the
  // response tokens.
  torch::Tensor HeadValues(const torch::Tensor& hidden, const model::TokenBatch& tb) {
    return in_.models->value_head()(hidden).squeeze(-1).to(torch::kCPU, torch::kFloat32) *
           tb.response_mask;
  }
  // The critic's current values of the rows' response tokens, [B, T].
  torch::Tensor CriticValues(const model::TokenBatch& tb) {
    if (in_.models->value_head()) return HeadValues(in_.models->policy()->Hidden(tb.inputs), tb);
    return model::ResponseValues(in_.models->critic(), tb);
  }
  // The clipped value loss of rows [begin, end) (token mean over the
  // batch), as a micro-batch result.
  MicroResult ValueLoss(const torch::Tensor& values, const model::TokenBatch& tb, int64_t begin,
                        int64_t end) const;

  // Per sample, per response token: the rollout buffer.
  std::vector<std::vector<float>> advantages_, returns_, values_;
  // Sum over response tokens of log pi_old - log pi_ref (kl_mode reward).
  double kl_sum_ = 0;
};

absl::StatusOr<MicroResult> PpoObjective::Loss(int64_t begin, int64_t end) {
  absl::StatusOr<model::TokenBatch> tb = Tokens(begin, end);
  if (!tb.ok()) return tb.status();
  model::Transformer& policy = in_.models->policy();
  const bool shared = static_cast<bool>(in_.models->value_head());
  torch::Tensor logp, values;
  if (shared) {
    const torch::Tensor hidden = policy->Hidden(tb->inputs);
    logp = model::TargetLogProbsFromLogits(policy->ApplyHead(hidden), *tb, temperature());
    values = HeadValues(hidden, *tb);
  } else {
    logp = model::TargetLogProbs(policy, *tb, temperature());
  }
  MicroResult r = PolicyTerm(
      *tb, logp, model::PlaceResponseValues(Rows(advantages_, begin, end), *tb), begin, end);
  if (shared) {
    MicroResult v = ValueLoss(values, *tb, begin, end);
    r.loss = r.loss + in_.job->ppo().vf_coef() * v.loss;
    r.value_loss = v.value_loss;
    r.value_clipped = v.value_clipped;
  }
  return r;
}

absl::Status PpoObjective::Complete(UpdateEngine& engine, v1::TrainStats* stats) {
  if (model::Transformer& critic = in_.models->critic(); !critic.is_empty()) {
    MicroFn critic_micro = [&](int64_t begin, int64_t end) -> absl::StatusOr<MicroResult> {
      absl::StatusOr<model::TokenBatch> tb = Tokens(begin, end);
      if (!tb.ok()) return tb.status();
      return ValueLoss(model::ResponseValues(critic, *tb), *tb, begin, end);
    };
    absl::StatusOr<v1::TrainStats> critic_stats =
        engine.Update(PhaseId::kCritic, rows(), critic_micro);
    if (!critic_stats.ok()) return critic_stats.status();
    stats->set_value_loss(critic_stats->value_loss());
    stats->set_value_clip_fraction(critic_stats->value_clip_fraction());
    stats->set_activation_bytes(
        std::max(stats->activation_bytes(), critic_stats->activation_bytes()));
  }
  if (KlInReward(*in_.job)) stats->set_kl(total_tokens_ > 0 ? kl_sum_ / total_tokens_ : 0);
  return absl::OkStatus();
}

MicroResult PpoObjective::ValueLoss(const torch::Tensor& values, const model::TokenBatch& tb,
                                    int64_t begin, int64_t end) const {
  const double clip = in_.job->ppo().value_clip();
  const torch::Tensor old_values = model::PlaceResponseValues(Rows(values_, begin, end), tb);
  const torch::Tensor returns = model::PlaceResponseValues(Rows(returns_, begin, end), tb);
  MicroResult r;
  r.loss = ClippedValueLoss(values, old_values, returns, tb.response_mask, clip,
                            std::max(1.0, total_tokens_));
  r.value_loss = r.loss.item<double>();
  r.tokens = tb.response_mask.sum().item<double>();
  if (clip > 0) {
    r.value_clipped =
        (((values.detach() - old_values).abs() > clip).to(torch::kFloat32) * tb.response_mask)
            .sum()
            .item<double>();
  }
  return r;
}

// Each token's reward is the sample's reward on its last trained token; with
// kl_mode reward, minus kl_coef times log pi_old - log pi_ref on every token.
absl::Status PpoObjective::ComputeTargets() {
  const auto& ppo = in_.job->ppo();
  const double kl_coef = in_.job->grpo().kl_coef();
  const bool kl_in_reward = kl_coef > 0 && KlInReward(*in_.job);
  const int64_t micro_rows = MicroBatchRows(*in_.job);
  try {
    torch::NoGradGuard no_grad;
    for (int64_t begin = 0; begin < rows(); begin += micro_rows) {
      const int64_t end = std::min(rows(), begin + micro_rows);
      absl::StatusOr<model::TokenBatch> tb = Tokens(begin, end);
      if (!tb.ok()) return AtRows(tb.status(), in_.worker_id, begin, end);
      const torch::Tensor values = CriticValues(*tb);
      torch::Tensor rewards = torch::zeros_like(tb->response_mask);
      auto acc = rewards.accessor<float, 2>();
      const torch::Tensor mask = tb->response_mask.cpu();
      const auto trained = mask.accessor<float, 2>();
      std::vector<absl::Span<const float>> old_rows, ref_rows;
      for (int64_t i = begin; i < end; ++i) {
        const int64_t row = i - begin;
        // The reward goes on the policy's last token: a multi-turn response
        // may end with environment tokens (an observation cut at the token
        // limit), which GAE skips. A response without a policy token trains
        // nothing.
        int64_t last = tb->response_start[row] + tb->response_length[row] - 1;
        while (last >= tb->response_start[row] && trained[row][last] == 0) --last;
        if (last >= tb->response_start[row]) acc[row][last] = sample(i).reward();
        old_rows.emplace_back(sample(i).old_logprobs());
        ref_rows.emplace_back(sample(i).ref_logprobs());
      }
      if (kl_in_reward) {
        const torch::Tensor k1 = (model::PlaceResponseValues(old_rows, *tb) -
                                  model::PlaceResponseValues(ref_rows, *tb)) *
                                 tb->response_mask;
        rewards = rewards - kl_coef * k1;
        kl_sum_ += k1.sum().item<double>();
      }
      const Gae gae = ComputeGae(rewards, values, tb->response_mask, ppo.gamma(), ppo.lam());
      for (int64_t row = 0; row < end - begin; ++row) {
        advantages_.push_back(model::RowResponseValues(gae.advantages, *tb, row));
        returns_.push_back(model::RowResponseValues(gae.returns, *tb, row));
        values_.push_back(model::RowResponseValues(values, *tb, row));
      }
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat(in_.worker_id, ": PPO advantages: ", e.what_without_backtrace()));
  }
  if (ppo.whiten_advantages()) {
    double sum = 0, sq = 0, n = 0;
    for (const auto& row : advantages_) {
      for (float a : row) sum += a, sq += static_cast<double>(a) * a, ++n;
    }
    const double mean = n > 0 ? sum / n : 0;
    const double std = n > 0 ? std::sqrt(std::max(0.0, sq / n - mean * mean)) : 0;
    for (auto& row : advantages_) {
      for (float& a : row) a = static_cast<float>((a - mean) / (std + 1e-8));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Objective>> NewPpoObjective(const ObjectiveInput& in) {
  auto objective = std::make_unique<PpoObjective>(in);
  if (absl::Status s = objective->Check(); !s.ok()) return s;
  if (absl::Status s = objective->ComputeTargets(); !s.ok()) return s;
  return objective;
}

}  // namespace trellis::learner::internal
