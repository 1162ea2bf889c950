#include "loop/policy_gradient.h"

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "config/worker_id.h"
#include "loop/batch.h"
#include "loop/loop_util.h"
#include "loop/recipes/dapo.h"

namespace trellis::loop {
namespace {

using ledger::Stage;

// One record per verifier per rollout round (dynamic sampling runs
// several); the step's drops go on each verifier's first.
void RecordVerifiers(const google::protobuf::RepeatedPtrField<v1::VerifierStats>& stats,
                     int64_t dropped, ledger::Ledger& ledger) {
  std::set<std::string> named;
  for (const v1::VerifierStats& vs : stats) {
    v1::VerifierStats recorded = vs;
    recorded.set_dropped(named.insert(vs.verifier()).second ? dropped : 0);
    ledger.RecordVerifier(recorded);
  }
}

}  // namespace

PolicyGradientRecipe::ReferenceUse PolicyGradientRecipe::reference_use() const {
  const bool kl = driver_.job().grpo().kl_coef() > 0 && driver_.roles().reference != nullptr;
  return kl ? ReferenceUse::kKlPenalty : ReferenceUse::kNone;
}

absl::StatusOr<std::optional<learner::GroupAdvantages>> PolicyGradientRecipe::Advantages(
    const std::vector<float>& rewards, std::vector<bool>& dropped) const {
  const v1::GrpoConfig& grpo = driver_.job().grpo();
  const int64_t group = grpo.responses_per_prompt();
  absl::StatusOr<learner::GroupAdvantages> adv;
  if (std::find(dropped.begin(), dropped.end(), true) != dropped.end()) {
    adv = learner::AdvantagesWithout(grpo.advantage_estimator(), rewards, dropped, group,
                                     grpo.scale_rewards());
  } else {
    const std::vector<int64_t> sizes(rewards.size() / group, group);
    adv = learner::ComputeAdvantages(grpo.advantage_estimator(), rewards, sizes,
                                     grpo.scale_rewards());
  }
  if (!adv.ok()) return adv.status();
  return std::make_optional(*std::move(adv));
}

absl::StatusOr<std::vector<float>> PolicyGradientRecipe::Rewards(const StepSamples& drawn) {
  std::vector<float> rewards;
  for (const v1::VerifyResult& r : drawn.verdicts.results()) rewards.push_back(r.reward());
  return rewards;
}

absl::StatusOr<SampledStep> PolicyGradientRecipe::Sample(int64_t step) {
  const v1::GrpoConfig& grpo = driver_.job().grpo();
  if (driver_.job().async().enabled() && !grpo.dapo().dynamic_sampling()) {
    // The verification finishes beside the next rollout and the update.
    return driver_.StartSampleStep(step, grpo.prompts_per_step(), grpo.responses_per_prompt());
  }
  SampledStep out;
  absl::StatusOr<StepSamples> sampled =
      driver_.SampleStep(step, grpo.prompts_per_step(), grpo.responses_per_prompt(), out.counts);
  if (!sampled.ok()) return sampled.status();
  out.drawn = *std::move(sampled);
  if (grpo.dapo().dynamic_sampling()) {
    absl::StatusOr<RewardSummary> r = SampleUsefulGroups(driver_, step, &out.drawn, out.counts);
    if (!r.ok()) return r.status();
    // Dynamic sampling trains on groups with mixed rewards only; report the
    // policy's reward over everything it sampled.
    out.counts.mean_reward = r->mean_reward;
    out.counts.accuracy = r->accuracy;
    out.rewards_over_all_drawn = true;
  }
  out.counts.prompts += out.counts.prompts_extra;
  return out;
}

absl::Status PolicyGradientRecipe::Step(int64_t step, ledger::StepCounts& counts) {
  const v1::GrpoConfig& grpo = driver_.job().grpo();
  const Roles& roles = driver_.roles();
  ledger::Ledger& ledger = driver_.ledger();
  const int64_t group = grpo.responses_per_prompt();
  absl::StatusOr<SampledStep> sampled =
      driver_.TakeSamples(step, [this](int64_t s) { return Sample(s); });
  if (!sampled.ok()) return sampled.status();
  // The reference needs the samples, not their verdicts: under async it
  // scores them while their verification (pending) finishes.
  absl::StatusOr<v1::LogProbResponse> ref;
  const ReferenceUse use = reference_use();
  if (use != ReferenceUse::kNone) {
    v1::LogProbRequest scored;
    *scored.mutable_samples() = sampled->pending != nullptr ? sampled->pending->rollout.samples()
                                                            : sampled->drawn.rollout.samples();
    auto span = ledger.Begin(Stage::kReference, config::WorkerId(v1::REFERENCE).ToString());
    ref = roles.reference->LogProbs(scored);
    if (!ref.ok()) return At(ref.status(), "reference");
  }
  if (absl::Status s = driver_.FinishSampling(*sampled); !s.ok()) return s;
  StepSamples& drawn = sampled->drawn;
  const ledger::StepCounts opened = counts;
  counts = sampled->counts;
  counts.step = opened.step;
  counts.policy_version = opened.policy_version;
  counts.rollout_actors = RolloutActors(drawn);
  absl::StatusOr<std::vector<float>> rewards = Rewards(drawn);
  if (!rewards.ok()) return rewards.status();

  v1::TrainBatch batch;
  {
    auto span = ledger.Begin(Stage::kAdvantage, config::WorkerId(v1::SCHEDULER).ToString());
    BatchInput in;
    in.samples = &drawn.rollout.samples();
    in.verdicts = &drawn.verdicts;
    in.group = group;
    in.rewards = *std::move(rewards);
    in.dropped = DroppedSamples(drawn.verdicts, DropsTimeouts(driver_.job()));
    absl::StatusOr<std::optional<learner::GroupAdvantages>> adv =
        Advantages(in.rewards, in.dropped);
    if (!adv.ok()) return At(adv.status(), "advantages");
    if (adv->has_value()) in.advantages = &**adv;
    if (use == ReferenceUse::kKlPenalty) in.reference = &*ref;
    if (use == ReferenceUse::kTeacher) in.teacher = &*ref;
    in.overlong_filtering = grpo.dapo().overlong_filtering();
    in.learner_version = counts.policy_version;
    const ledger::StepCounts sampling = counts;
    batch = AssembleBatch(in, &counts);
    if (sampled->rewards_over_all_drawn) {
      counts.mean_reward = sampling.mean_reward;
      counts.accuracy = sampling.accuracy;
    }
    RecordVerifiers(drawn.verdicts.stats(), counts.samples_dropped, ledger);
    if (drawn.environment.has_value()) {
      ledger.RecordEnvironment(*drawn.environment, drawn.rollout_seconds);
    }
  }
  const auto kept = static_cast<int64_t>(drawn.examples.size());
  counts.prompt_account.dropped["dynamic_sampling"] = counts.prompts - kept;
  counts.prompt_account.dropped["no_sample_kept"] =
      kept - static_cast<int64_t>(counts.prompt_ids.size());

  absl::StatusOr<v1::TrainStats> stats = v1::TrainStats();
  const bool left_out =
      counts.samples_dropped > 0 || counts.samples_overlong > 0 || grpo.dapo().dynamic_sampling();
  if (batch.samples_size() > 0 || !left_out) {
    auto span = ledger.Begin(Stage::kUpdate, config::WorkerId(v1::LEARNER).ToString());
    stats = roles.learner->TrainStep(batch);
  }  // else every sample was left out (dropped, filtered): no update this step
  if (!stats.ok()) return At(stats.status(), "update");
  RecordUpdate(*stats, &counts);
  counts.logprob_gap = stats->logprob_gap();
  counts.importance_weight_truncated = stats->importance_weight_truncated();
  counts.router_aux_loss = stats->router_aux_loss();
  counts.routing_mismatch = stats->routing_mismatch();
  counts.routing_record_bytes = stats->routing_record_bytes();
  counts.logprob_gap_replayed = stats->logprob_gap_replayed();
  counts.logprob_gap_own_routing = stats->logprob_gap_own_routing();
  return absl::OkStatus();
}

std::string PolicyGradientRecipe::Progress(int64_t step, const ledger::StepCounts& counts,
                                           const ledger::StepMetrics& metrics) const {
  const v1::GrpoConfig& grpo = driver_.job().grpo();
  const bool teacher = reference_use() == ReferenceUse::kTeacher;
  return absl::StrFormat(
      "step %4d/%d  reward %.3f  acc %.3f  effective %.2f  %s %.4f  step %.2fs  eta %.0fs%s\n",
      step + 1, grpo.steps(), counts.mean_reward, counts.accuracy, metrics.effective_sample_rate,
      teacher ? "divergence" : "kl", teacher ? counts.teacher_divergence : counts.kl,
      metrics.step_seconds, driver_.Eta(step, grpo.steps()),
      grpo.dapo().dynamic_sampling()
          ? absl::StrFormat("  rounds %d", 1 + counts.sampling_rounds_extra)
          : "");
}

}  // namespace trellis::loop
