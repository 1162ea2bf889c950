// PPO's critic inside the local learner (learner/internal/local_learner.h):
// its values, the GAE targets the update trains on, and the value loss.

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "learner/internal/local_learner.h"
#include "learner/internal/optimizer.h"
#include "learner/losses.h"

namespace trellis::learner::internal {

std::vector<absl::Span<const float>> Rows(const std::vector<std::vector<float>>& rows,
                                          int64_t begin, int64_t end) {
  return std::vector<absl::Span<const float>>(rows.begin() + begin, rows.begin() + end);
}

model::NamedTensors LocalLearner::CriticWeights() const {
  if (!critic_.is_empty()) return critic_->NamedWeights();
  return {{"value_head.weight", value_head_->weight}};
}

absl::Status LocalLearner::LoadCritic(const model::NamedTensors& weights) {
  if (!critic_.is_empty()) return critic_->LoadWeights(weights);
  if (weights.size() != 1 || weights[0].first != "value_head.weight" ||
      weights[0].second.sizes() != value_head_->weight.sizes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected one tensor value_head.weight of shape [1, ", job_.model().d_model(), "]"));
  }
  torch::NoGradGuard no_grad;
  value_head_->weight.copy_(weights[0].second);
  return absl::OkStatus();
}

int64_t LocalLearner::CriticBytes() {
  int64_t bytes = 0;
  for (const auto& [name, p] : CriticWeights()) {
    bytes += p.nbytes();
    if (p.grad().defined()) bytes += p.grad().nbytes();
  }
  if (critic_phase_.optimizer) bytes += OptimizerStateBytes(*critic_phase_.optimizer);
  return bytes;
}

absl::StatusOr<model::TokenBatch> LocalLearner::SampleBatch(const v1::TrainBatch& batch,
                                                            int64_t begin, int64_t end) const {
  std::vector<model::SequencePair> pairs;
  for (int64_t i = begin; i < end; ++i) {
    pairs.push_back({batch.samples(i).prompt_tokens(), batch.samples(i).response_tokens()});
  }
  return model::MakeTokenBatch(pairs, options_.pad_id, job_.model().max_seq_len());
}

torch::Tensor LocalLearner::HeadValues(const torch::Tensor& hidden, const model::TokenBatch& tb) {
  return value_head_(hidden).squeeze(-1).to(torch::kFloat32) * tb.response_mask;
}

torch::Tensor LocalLearner::CriticValues(const model::TokenBatch& tb) {
  if (value_head_) return HeadValues(model_->Hidden(tb.inputs), tb);
  return model::ResponseValues(critic_, tb);
}

MicroResult LocalLearner::ValueLoss(const torch::Tensor& values, const model::TokenBatch& tb,
                                    const PpoTargets& targets, int64_t begin, int64_t end,
                                    double total_tokens) const {
  const double clip = job_.ppo().value_clip();
  const torch::Tensor old_values = model::PlaceResponseValues(Rows(targets.values, begin, end), tb);
  const torch::Tensor returns = model::PlaceResponseValues(Rows(targets.returns, begin, end), tb);
  MicroResult r;
  r.loss = ClippedValueLoss(values, old_values, returns, tb.response_mask, clip,
                            std::max(1.0, total_tokens));
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

// Each token's reward is the sample's reward on its last token; with
// kl_mode reward, minus kl_coef times log pi_old - log pi_ref on every token.
absl::StatusOr<PpoTargets> LocalLearner::ComputePpoTargets(const v1::TrainBatch& batch) {
  const auto& ppo = job_.ppo();
  const double kl_coef = job_.grpo().kl_coef();
  const bool kl_in_reward = kl_coef > 0 && ppo.kl_mode() == "reward";
  const int64_t rows = batch.samples_size();
  const int64_t micro_rows = std::max(1, job_.grpo().micro_batch_size());
  PpoTargets t;
  try {
    torch::NoGradGuard no_grad;
    for (int64_t begin = 0; begin < rows; begin += micro_rows) {
      const int64_t end = std::min(rows, begin + micro_rows);
      absl::StatusOr<model::TokenBatch> tb = SampleBatch(batch, begin, end);
      if (!tb.ok()) {
        return absl::Status(tb.status().code(),
                            absl::StrCat(options_.worker_id, ": rows [", begin, ", ", end,
                                         "): ", tb.status().message()));
      }
      const torch::Tensor values = CriticValues(*tb);
      torch::Tensor rewards = torch::zeros_like(tb->response_mask);
      auto acc = rewards.accessor<float, 2>();
      std::vector<absl::Span<const float>> old_rows, ref_rows;
      for (int64_t i = begin; i < end; ++i) {
        const int64_t row = i - begin;
        acc[row][tb->response_start[row] + tb->response_length[row] - 1] =
            batch.samples(i).reward();
        old_rows.emplace_back(batch.samples(i).old_logprobs());
        ref_rows.emplace_back(batch.samples(i).ref_logprobs());
      }
      if (kl_in_reward) {
        const torch::Tensor k1 = (model::PlaceResponseValues(old_rows, *tb) -
                                  model::PlaceResponseValues(ref_rows, *tb)) *
                                 tb->response_mask;
        rewards = rewards - kl_coef * k1;
        t.kl_sum += k1.sum().item<double>();
      }
      const Gae gae = ComputeGae(rewards, values, tb->response_mask, ppo.gamma(), ppo.lam());
      for (int64_t row = 0; row < end - begin; ++row) {
        t.advantages.push_back(model::RowResponseValues(gae.advantages, *tb, row));
        t.returns.push_back(model::RowResponseValues(gae.returns, *tb, row));
        t.values.push_back(model::RowResponseValues(values, *tb, row));
      }
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat(options_.worker_id, ": PPO advantages: ", e.what_without_backtrace()));
  }
  if (ppo.whiten_advantages()) {
    double sum = 0, sq = 0, n = 0;
    for (const auto& row : t.advantages) {
      for (float a : row) sum += a, sq += static_cast<double>(a) * a, ++n;
    }
    const double mean = n > 0 ? sum / n : 0;
    const double std = n > 0 ? std::sqrt(std::max(0.0, sq / n - mean * mean)) : 0;
    for (auto& row : t.advantages) {
      for (float& a : row) a = static_cast<float>((a - mean) / (std + 1e-8));
    }
  }
  return t;
}

}  // namespace trellis::learner::internal
