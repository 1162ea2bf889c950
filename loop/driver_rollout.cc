// The driver's rollout rounds and steps' sampling, the asynchronous
// pipeline behind TakeSamples, and the RL prompt stream's account.

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "config/worker_id.h"
#include "loop/driver.h"
#include "loop/episode_runner.h"
#include "loop/loop_util.h"
#include "loop/reward_rule.h"

namespace trellis::loop {
namespace {

using ledger::Stage;

// A step's first round in its counts.
void CountFirstRound(const StepSamples& drawn, ledger::StepCounts& counts) {
  counts.samples_generated = drawn.rollout.samples_size();
  counts.generated_tokens = drawn.rollout.generated_tokens();
  counts.verify_overlap_seconds = drawn.verify_overlap_seconds;
  counts.rollout_concurrency = drawn.rollout.decode_token_budget();
  counts.samples_reward_clipped = drawn.rewards_clipped;
  counts.rollout_groups_carried = drawn.partial.groups_carried;
  counts.rollout_groups_restarted = drawn.partial.groups_restarted;
  counts.rollout_tokens_discarded = drawn.partial.tokens_discarded;
}

}  // namespace

absl::Status Driver::SampleRound(int64_t step, int round, int64_t prompts, int64_t group,
                                 StepSamples* out, double* seconds) {
  absl::StatusOr<std::unique_ptr<PendingRound>> started = StartRound(step, round, prompts, group);
  if (!started.ok()) return started.status();
  return FinishRound(**started, out, seconds);
}

v1::GenerateRequest Driver::RoundRequest(int64_t step, int round, int64_t group) const {
  v1::GenerateRequest request;
  request.set_responses_per_prompt(static_cast<int32_t>(group));
  *request.mutable_sampling() = TrainSampling(job_);
  // Round 0 keeps the seed a step had before dynamic sampling existed.
  const uint64_t salt = static_cast<uint64_t>(step) | (static_cast<uint64_t>(round) << 48);
  request.set_seed(MixSeed(job_.runtime().seed(), salt));
  return request;
}

absl::StatusOr<std::unique_ptr<PendingRound>> Driver::StartRound(int64_t step, int round,
                                                                 int64_t prompts, int64_t group) {
  if (partial_ != nullptr && round == 0) return StartPartialRound(step, group);
  v1::GenerateRequest request = RoundRequest(step, round, group);
  auto out = std::make_unique<PendingRound>();
  std::vector<const data::Example*>& examples = out->examples;
  {
    absl::MutexLock lock(&account_mu_);
    for (int64_t i = 0; i < prompts; ++i) examples.push_back(&train_stream_.Next());
    account_.drawn += prompts;
    account_.in_flight += prompts;
  }
  for (const data::Example* ex : examples) {
    absl::StatusOr<v1::Prompt> prompt = format_->MakePrompt(*ex);
    if (!prompt.ok()) return prompt.status();
    *request.add_prompts() = *std::move(prompt);
  }

  if (!job_.environment().name().empty()) {
    // Multi-turn: the environment gives the rewards; no verifier.
    out->start = absl::Now();
    absl::StatusOr<EpisodeResults> episodes;
    {
      auto span = ledger_->Begin(Stage::kRollout, config::WorkerId(v1::ACTOR).ToString());
      episodes = RunEpisodes(request, examples);
      span.End();
    }
    out->rollout_end = absl::Now();
    if (!episodes.ok()) return At(episodes.status(), "rollout");
    ledger_->RecordFlops(Stage::kRollout, episodes->rollout.forward_flops());
    out->episode_verdicts = EpisodeVerdicts(*episodes);
    out->environment = episodes->stats;
    out->rollout = std::move(episodes->rollout);
    return out;
  }

  // Verification runs beside the rollout: each part the actors hand over
  // is verified while the rest is still being generated.
  std::map<uint64_t, const data::Example*> by_id;
  for (const data::Example* ex : examples) by_id[ex->id] = ex;
  out->verifying = std::make_unique<StreamingVerify>(roles_.verifier, ledger_, std::move(by_id));
  StreamingVerify* verifying = out->verifying.get();
  out->start = absl::Now();
  absl::StatusOr<v1::GenerateResponse> rollout;
  {
    // The actors' rollout (an actor pool's, too) under the first actor.
    auto span = ledger_->Begin(Stage::kRollout, config::WorkerId(v1::ACTOR).ToString());
    rollout = roles_.actor->GenerateStreaming(
        request, [verifying](const v1::GenerateResponse& part) { verifying->Add(part); });
    span.End();
  }
  out->rollout_end = absl::Now();
  if (!rollout.ok()) return At(rollout.status(), "rollout");
  ledger_->RecordFlops(Stage::kRollout, rollout->forward_flops());
  out->rollout = *std::move(rollout);
  return out;
}

absl::Status Driver::FinishRound(PendingRound& round, StepSamples* out, double* seconds) {
  absl::StatusOr<StreamingVerify::Result> verified =
      round.verifying == nullptr
          ? StreamingVerify::Result{*round.episode_verdicts}
          : round.verifying->Finish(round.rollout.samples(), round.rollout_end);
  if (!verified.ok()) return At(verified.status(), "verify");
  if (round.verifying == nullptr) {
    if (!out->environment.has_value()) out->environment.emplace();
    AddEnvironmentStats(round.environment, &*out->environment);
  }
  out->rollout_seconds += absl::ToDoubleSeconds(round.rollout_end - round.start);
  out->rewards_clipped += ApplyRewardRule(job_.verifier(), &verified->verdicts).clipped;
  if (seconds != nullptr) *seconds += absl::ToDoubleSeconds(absl::Now() - round.start);
  out->verify_overlap_seconds += verified->overlap_seconds;
  out->partial += round.partial;
  out->examples.insert(out->examples.end(), round.examples.begin(), round.examples.end());
  // The rounds' counts are summed (MergeFrom keeps the newest scalars).
  const int64_t generated = out->rollout.generated_tokens() + round.rollout.generated_tokens();
  const int64_t prefill = out->rollout.prefill_tokens() + round.rollout.prefill_tokens();
  const double flops = out->rollout.forward_flops() + round.rollout.forward_flops();
  out->rollout.MergeFrom(round.rollout);  // appends the samples
  out->rollout.set_generated_tokens(generated);
  out->rollout.set_prefill_tokens(prefill);
  out->rollout.set_forward_flops(flops);
  out->verdicts.MergeFrom(verified->verdicts);  // appends the results and this round's stats
  return absl::OkStatus();
}

absl::StatusOr<EpisodeResults> Driver::RunEpisodes(
    const v1::GenerateRequest& request, const std::vector<const data::Example*>& examples) {
  if (roles_.environment == nullptr) return NoEnvironment();
  EpisodeRunner runner(job_, roles_.actor, roles_.environment, &format());
  return runner.Run(request, examples);
}

absl::Status Driver::NoEnvironment() const {
  return absl::FailedPreconditionError(
      absl::StrCat("environment.name is \"", job_.environment().name(),
                   "\" but the run bound no environment (Roles.environment is null): multi-turn "
                   "rollouts need the environment's pool"));
}

absl::StatusOr<StepSamples> Driver::SampleStep(int64_t step, int64_t prompts, int64_t group,
                                               ledger::StepCounts& counts) {
  counts.prompts = prompts;
  counts.responses_per_prompt = group;
  StepSamples drawn;
  if (absl::Status s = SampleRound(step, 0, prompts, group, &drawn, nullptr); !s.ok()) return s;
  CountFirstRound(drawn, counts);
  return drawn;
}

absl::StatusOr<SampledStep> Driver::StartSampleStep(int64_t step, int64_t prompts, int64_t group) {
  SampledStep out;
  out.counts.prompts = prompts;
  out.counts.responses_per_prompt = group;
  absl::StatusOr<std::unique_ptr<PendingRound>> round = StartRound(step, 0, prompts, group);
  if (!round.ok()) return round.status();
  out.pending = *std::move(round);
  return out;
}

absl::Status Driver::FinishSampling(SampledStep& sampled) {
  if (sampled.pending == nullptr) return absl::OkStatus();
  const std::unique_ptr<PendingRound> round = std::move(sampled.pending);
  if (absl::Status s = FinishRound(*round, &sampled.drawn, nullptr); !s.ok()) return s;
  CountFirstRound(sampled.drawn, sampled.counts);
  return absl::OkStatus();
}

absl::StatusOr<SampledStep> Driver::TakeSamples(int64_t step, const SampleFn& sample) {
  if (!job_.async().enabled()) return sample(step);
  if (pipeline_ == nullptr) {
    first_step_ = step;
    first_version_ = roles_.learner->policy_version();
    pipeline_ = std::make_unique<RolloutPipeline>(
        step, spec_->steps(job_), PipelineLead(job_.async()),
        [this, sample](int64_t t) -> absl::StatusOr<SampledStep> {
          // The newest weights published, loaded between two rollouts.
          absl::MutexLock lock(&actor_mu_);
          if (absl::Status s = LoadWeights(); !s.ok()) return At(s, "weight sync");
          return sample(t);
        },
        [this] { return Mark(); });
  }
  return pipeline_->Take(step);
}

absl::Status Driver::Account(ledger::StepCounts& counts) {
  absl::MutexLock lock(&account_mu_);
  account_.in_flight -= counts.prompts;
  if (partial_ != nullptr && counts.step + 1 == spec_->steps(job_)) {
    // The groups partial rollout still had going when the last step ended.
    const int64_t left = partial_->DropAll();
    account_.in_flight -= left;
    if (left > 0) counts.prompt_account.dropped["in_flight_at_end"] += left;
  }
  account_.trained += static_cast<int64_t>(counts.prompt_ids.size());
  for (const auto& [reason, n] : counts.prompt_account.dropped) account_.dropped[reason] += n;
  counts.prompt_account = account_;
  if (account_.Reconciles()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(
      "prompt accounting: ", account_.drawn, " prompts drawn but ", account_.trained, " trained + ",
      account_.dropped_total(), " dropped + ", account_.in_flight, " in flight"));
}

}  // namespace trellis::loop
