// GrpoLoop::OnlineDpoStep and the pair choice it uses.

#include "scheduler/online_dpo.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "config/recipe.h"
#include "scheduler/grpo_loop.h"
#include "scheduler/loop_util.h"

namespace trellis::scheduler {
namespace {

using ledger::Stage;

double Sum(const google::protobuf::RepeatedField<float>& values) {
  double sum = 0;
  for (float v : values) sum += v;
  return sum;
}

}  // namespace

int64_t ResponsesPerPrompt(const v1::JobConfig& job) {
  return config::RecipeOf(job) == config::Recipe::kOnlineDpo ? job.dpo().responses_per_prompt()
                                                             : job.grpo().responses_per_prompt();
}

std::vector<std::optional<PairChoice>> ChoosePairs(absl::Span<const float> rewards,
                                                   int64_t group) {
  std::vector<std::optional<PairChoice>> pairs;
  for (size_t begin = 0; begin + group <= rewards.size(); begin += group) {
    PairChoice c{static_cast<int64_t>(begin), static_cast<int64_t>(begin)};
    for (size_t i = begin + 1; i < begin + group; ++i) {
      if (rewards[i] > rewards[c.chosen]) c.chosen = static_cast<int64_t>(i);
      if (rewards[i] < rewards[c.rejected]) c.rejected = static_cast<int64_t>(i);
    }
    if (rewards[c.chosen] > rewards[c.rejected]) {
      pairs.emplace_back(c);
    } else {
      pairs.emplace_back(std::nullopt);
    }
  }
  return pairs;
}

absl::Status GrpoLoop::OnlineDpoStep(int64_t step) {
  const v1::DpoConfig& dpo = job_.dpo();
  const int64_t group = dpo.responses_per_prompt();
  ledger::StepCounts counts = OpenStep(step, dpo.batch_size(), group);

  StepSamples drawn;
  if (absl::Status s = SampleRound(step, 0, dpo.batch_size(), &drawn, nullptr); !s.ok()) {
    return s;
  }
  const auto& samples = drawn.rollout.samples();
  counts.samples_generated = samples.size();
  counts.generated_tokens = drawn.rollout.generated_tokens();
  counts.verify_overlap_seconds = drawn.verify_overlap_seconds;
  std::vector<float> rewards;
  double reward_sum = 0;
  int64_t correct = 0;
  for (int i = 0; i < drawn.verdicts.results_size(); ++i) {
    const v1::VerifyResult& r = drawn.verdicts.results(i);
    rewards.push_back(r.reward());
    reward_sum += r.reward();
    correct += r.verdict() == v1::CORRECT;
  }
  const int64_t n = static_cast<int64_t>(rewards.size());
  counts.mean_reward = n > 0 ? reward_sum / n : 0;
  counts.accuracy = n > 0 ? static_cast<double>(correct) / n : 0;
  for (const v1::VerifierStats& vs : drawn.verdicts.stats()) ledger_->RecordVerifier(vs);

  // One pair per prompt with mixed rewards; the reference scores both
  // responses of every pair in one call.
  v1::LogProbRequest scored;
  std::vector<PairChoice> pairs;
  for (const std::optional<PairChoice>& choice : ChoosePairs(rewards, group)) {
    if (!choice.has_value()) {
      counts.samples_zero_variance += group;  // no pair: nothing carries gradient
      continue;
    }
    pairs.push_back(*choice);
    *scored.add_samples() = samples[choice->chosen];
    *scored.add_samples() = samples[choice->rejected];
  }
  counts.samples_effective = 2 * static_cast<int64_t>(pairs.size());
  if (!pairs.empty()) {
    absl::StatusOr<v1::LogProbResponse> ref;
    {
      auto span = ledger_->Begin(Stage::kReference, "reference-0");
      ref = roles_.reference->LogProbs(scored);
    }
    if (!ref.ok()) return At(ref.status(), "reference");
    if (ref->sequences_size() != scored.samples_size()) {
      return absl::InternalError(absl::StrCat("reference: ", ref->sequences_size(),
                                              " log-prob rows for ", scored.samples_size(),
                                              " responses"));
    }
    v1::PreferenceBatch batch;
    for (size_t k = 0; k < pairs.size(); ++k) {
      const v1::Sample& chosen = samples[pairs[k].chosen];
      v1::PreferencePair* p = batch.add_pairs();
      *p->mutable_prompt_tokens() = chosen.prompt_tokens();
      *p->mutable_chosen_tokens() = chosen.response_tokens();
      *p->mutable_rejected_tokens() = samples[pairs[k].rejected].response_tokens();
      p->set_ref_chosen_logprob(Sum(ref->sequences(2 * k).logprobs()));
      p->set_ref_rejected_logprob(Sum(ref->sequences(2 * k + 1).logprobs()));
    }
    absl::StatusOr<v1::TrainStats> stats;
    {
      auto span = ledger_->Begin(Stage::kUpdate, "learner-0");
      stats = roles_.learner->PreferenceStep(batch);
    }
    if (!stats.ok()) return At(stats.status(), "update");
    RecordUpdate(*stats, &counts);
  }  // else every group's rewards were equal: no update this step

  if (absl::Status s = SyncWeights(); !s.ok()) return At(s, "weight sync");

  ledger::StepMetrics metrics = ledger_->EndStep(counts);
  history_.push_back(metrics);
  if (progress_ != nullptr) {
    const double eta = Eta(step, dpo.steps());
    *progress_ << absl::StrFormat(
        "step %4d/%d  reward %.3f  acc %.3f  pairs %d  margin %.3f  loss %.4f  step %.2fs  "
        "eta %.0fs\n",
        step + 1, dpo.steps(), counts.mean_reward, counts.accuracy, pairs.size(),
        counts.reward_margin, counts.loss, metrics.step_seconds, eta);
    progress_->flush();
  }
  return absl::OkStatus();
}

}  // namespace trellis::scheduler
