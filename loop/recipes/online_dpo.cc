#include "loop/recipes/online_dpo.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "config/worker_id.h"
#include "loop/batch.h"
#include "loop/loop_util.h"
#include "loop/recipes/builtin.h"
#include "loop/rollout_recipe.h"

namespace trellis::loop {

std::vector<std::optional<PairChoice>> ChoosePairs(absl::Span<const float> rewards, int64_t group) {
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

namespace {

using ledger::Stage;

class OnlineDpo final : public RolloutRecipe {
 public:
  using RolloutRecipe::RolloutRecipe;

  absl::Status Step(int64_t step, ledger::StepCounts& counts) override {
    const v1::DpoConfig& dpo = driver_.job().dpo();
    const Roles& roles = driver_.roles();
    ledger::Ledger& ledger = driver_.ledger();
    const int64_t group = dpo.responses_per_prompt();
    // Asynchronous jobs take a step the pipeline sampled ahead.
    absl::StatusOr<SampledStep> sampled =
        driver_.TakeSamples(step, [this, group](int64_t t) -> absl::StatusOr<SampledStep> {
          SampledStep out;
          absl::StatusOr<StepSamples> drawn =
              driver_.SampleStep(t, driver_.job().dpo().batch_size(), group, out.counts);
          if (!drawn.ok()) return drawn.status();
          out.drawn = *std::move(drawn);
          return out;
        });
    if (!sampled.ok()) return sampled.status();
    if (absl::Status s = driver_.FinishSampling(*sampled); !s.ok()) return s;
    const ledger::StepCounts opened = counts;
    counts = sampled->counts;
    counts.step = opened.step;
    counts.policy_version = opened.policy_version;
    const StepSamples* drawn = &sampled->drawn;
    counts.rollout_actors = RolloutActors(*drawn);
    const auto& samples = drawn->rollout.samples();
    std::vector<float> rewards;
    double reward_sum = 0;
    int64_t correct = 0;
    for (const v1::VerifyResult& r : drawn->verdicts.results()) {
      rewards.push_back(r.reward());
      reward_sum += r.reward();
      correct += r.verdict() == v1::CORRECT;
    }
    const int64_t n = static_cast<int64_t>(rewards.size());
    counts.mean_reward = n > 0 ? reward_sum / n : 0;
    counts.accuracy = n > 0 ? static_cast<double>(correct) / n : 0;
    for (const v1::VerifierStats& vs : drawn->verdicts.stats()) ledger.RecordVerifier(vs);

    // One pair per prompt with mixed rewards; the reference scores both
    // responses of every pair in one call.
    v1::LogProbRequest scored;
    std::vector<PairChoice> pairs;
    const std::vector<std::optional<PairChoice>> choices = ChoosePairs(rewards, group);
    for (int64_t prompt = 0; prompt < static_cast<int64_t>(choices.size()); ++prompt) {
      const std::optional<PairChoice>& choice = choices[prompt];
      if (!choice.has_value()) {
        // No pair: nothing carries gradient (a failed verifier counted first).
        for (int64_t i = prompt * group; i < (prompt + 1) * group; ++i) {
          CountNoGradient(drawn->verdicts.results(static_cast<int>(i)).verdict(), &counts);
        }
        ++counts.prompt_account.dropped["no_pair"];
        continue;
      }
      counts.prompt_ids.push_back(samples[choice->chosen].prompt_id());
      CountStaleness(counts.policy_version, samples[choice->chosen], &counts);
      CountStaleness(counts.policy_version, samples[choice->rejected], &counts);
      pairs.push_back(*choice);
      *scored.add_samples() = samples[choice->chosen];
      *scored.add_samples() = samples[choice->rejected];
    }
    counts.samples_effective = 2 * static_cast<int64_t>(pairs.size());
    pairs_ = static_cast<int64_t>(pairs.size());
    if (pairs.empty()) return absl::OkStatus();  // every group's rewards were equal: no update

    absl::StatusOr<v1::LogProbResponse> ref;
    {
      auto span = ledger.Begin(Stage::kReference, config::WorkerId(v1::REFERENCE).ToString());
      ref = roles.reference->LogProbs(scored);
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
      p->set_ref_chosen_logprob(SumLogProbs(ref->sequences(2 * k).logprobs()));
      p->set_ref_rejected_logprob(SumLogProbs(ref->sequences(2 * k + 1).logprobs()));
    }
    absl::StatusOr<v1::TrainStats> stats;
    {
      auto span = ledger.Begin(Stage::kUpdate, config::WorkerId(v1::LEARNER).ToString());
      stats = roles.learner->PreferenceStep(batch);
    }
    if (!stats.ok()) return At(stats.status(), "update");
    RecordUpdate(*stats, &counts);
    return absl::OkStatus();
  }

  std::string Progress(int64_t step, const ledger::StepCounts& counts,
                       const ledger::StepMetrics& metrics) const override {
    const int64_t steps = driver_.job().dpo().steps();
    return absl::StrFormat(
        "step %4d/%d  reward %.3f  acc %.3f  pairs %d  margin %.3f  loss %.4f  step %.2fs  "
        "eta %.0fs\n",
        step + 1, steps, counts.mean_reward, counts.accuracy, pairs_, counts.reward_margin,
        counts.loss, metrics.step_seconds, driver_.Eta(step, steps));
  }

 private:
  // The last step's pairs.
  int64_t pairs_ = 0;
};

}  // namespace

absl::Status RegisterOnlineDpo(RecipeRegistry& registry) {
  RecipeSpec spec;
  spec.needs_reference = [](const v1::JobConfig&) { return true; };
  spec.steps = [](const v1::JobConfig& job) { return job.dpo().steps(); };
  spec.create = [](Driver& driver) -> absl::StatusOr<std::unique_ptr<Recipe>> {
    return std::make_unique<OnlineDpo>(driver);
  };
  return registry.Register("online_dpo", std::move(spec));
}

}  // namespace trellis::loop
