#include "scheduler/grpo_loop.h"

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "config/job_config.h"
#include "config/recipe.h"
#include "env/run_dir.h"
#include "learner/advantages.h"
#include "scheduler/dynamic_sampling.h"
#include "scheduler/loop_util.h"
#include "scheduler/online_dpo.h"
#include "scheduler/streaming_verify.h"

namespace trellis::scheduler {
namespace {

using ledger::Stage;

v1::SamplingParams TrainSampling(const v1::JobConfig& job) {
  v1::SamplingParams p;
  p.set_temperature(job.sampling().temperature());
  p.set_top_p(job.sampling().top_p());
  p.set_max_new_tokens(job.sampling().max_new_tokens());
  return p;
}

// Salt of the RL prompt stream's seed, so that it does not replay the SFT
// stream's order. (Per-step sampling seeds use the step number as salt.)
constexpr uint64_t kRlStreamSalt = 1ULL << 40;

std::vector<data::Example> SftExamples(const std::vector<data::Example>& train, int limit) {
  if (limit <= 0 || static_cast<size_t>(limit) >= train.size()) return train;
  return std::vector<data::Example>(train.begin(), train.begin() + limit);
}

}  // namespace

GrpoLoop::GrpoLoop(const v1::JobConfig& job, Roles roles,
                   const model::Tokenizer* tokenizer, data::Split data,
                   ledger::Ledger* ledger, std::string out_dir, std::ostream* progress)
    : job_(job),
      ppo_(config::RecipeOf(job) == config::Recipe::kPpo),
      reward_model_(ppo_ && job.ppo().reward() == "reward_model"),
      roles_(roles),
      tokenizer_(tokenizer),
      data_(std::move(data)),
      sft_stream_(SftExamples(data_.train, job.sft().num_examples()), job.runtime().seed()),
      train_stream_(data_.train, MixSeed(job.runtime().seed(), kRlStreamSalt)),
      ledger_(ledger),
      out_dir_(std::move(out_dir)),
      progress_(progress) {}

absl::StatusOr<v1::Prompt> GrpoLoop::MakePrompt(const data::Example& example) const {
  return scheduler::MakePrompt(*tokenizer_, example);
}

absl::Status GrpoLoop::SyncWeights() {
  if (roles_.learner->policy_version() == published_version_) return absl::OkStatus();
  auto span = ledger_->Begin(Stage::kWeightSync, "scheduler");
  absl::StatusOr<v1::WeightSyncStats> sent = roles_.learner->PublishWeights();
  if (!sent.ok()) return At(sent.status(), "publishing weights");
  absl::StatusOr<v1::WeightSyncStats> got = roles_.actor->SyncWeights(sent->version());
  if (!got.ok()) return At(got.status(), "actor weight sync");
  v1::WeightSyncStats handoff = *sent;
  handoff.set_transfer_seconds(sent->transfer_seconds() + got->transfer_seconds());
  handoff.set_load_seconds(got->load_seconds());
  ledger_->RecordHandoff("learner-0", handoff);
  // The publisher keeps the newest version's buckets staged for receivers;
  // while it packs a new version the previous one is still staged.
  if (published_version_ >= 0) {
    ledger_->RecordObject("learner-0", ledger::Object::kCommunication, 2 * sent->bytes(),
                          Stage::kWeightSync);
  }
  ledger_->RecordObject("learner-0", ledger::Object::kCommunication, sent->bytes(),
                        Stage::kWeightSync);
  published_version_ = sent->version();
  return absl::OkStatus();
}

absl::Status GrpoLoop::WarmUp() {
  const v1::SftConfig& sft = job_.sft();
  for (int step = 0; step < sft.steps(); ++step) {
    auto span = ledger_->Begin(Stage::kSft, "learner-0");
    v1::SftBatch batch;
    for (int i = 0; i < sft.batch_size(); ++i) {
      absl::StatusOr<v1::SftBatch::Pair> pair = MakeSftPair(*tokenizer_, sft_stream_.Next());
      if (!pair.ok()) return pair.status();
      *batch.add_pairs() = *std::move(pair);
    }
    absl::StatusOr<v1::TrainStats> stats = roles_.learner->SftStep(batch);
    if (!stats.ok()) return At(stats.status(), absl::StrCat("sft step ", step));
    const bool reached =
        sft.target_accuracy() > 0 && stats->sequence_accuracy() >= sft.target_accuracy();
    if (progress_ != nullptr && ((step + 1) % 20 == 0 || reached)) {
      *progress_ << absl::StrFormat("sft %4d/%d  loss %.4f  batch exact-match %.3f%s\n",
                                    step + 1, sft.steps(), stats->loss(),
                                    stats->sequence_accuracy(),
                                    reached ? "  (sft.target_accuracy reached)" : "");
      progress_->flush();
    }
    if (reached) break;
  }
  return absl::OkStatus();
}

absl::Status GrpoLoop::TakeReference() {
  if (roles_.reference == nullptr) return absl::OkStatus();
  return scheduler::TakeReference(*roles_.learner, *roles_.reference, *ledger_,
                                  env::RunDir(out_dir_).Reference());
}

absl::StatusOr<ledger::EvalMetrics> GrpoLoop::Evaluate(const std::string& label) {
  auto span = ledger_->Begin(Stage::kEval, "scheduler");
  const auto& eval = data_.eval;
  const int64_t n = job_.eval().num_prompts() > 0
                        ? std::min<int64_t>(job_.eval().num_prompts(), eval.size())
                        : static_cast<int64_t>(eval.size());
  ledger::EvalMetrics metrics;
  double reward_sum = 0;
  int64_t correct = 0;
  for (int64_t begin = 0; begin < n; begin += job_.eval().batch_size()) {
    const int64_t end = std::min<int64_t>(n, begin + job_.eval().batch_size());
    v1::GenerateRequest request;
    request.set_responses_per_prompt(1);
    *request.mutable_sampling() = TrainSampling(job_);
    request.mutable_sampling()->set_greedy(true);
    for (int64_t i = begin; i < end; ++i) {
      absl::StatusOr<v1::Prompt> prompt = MakePrompt(eval[i]);
      if (!prompt.ok()) return prompt.status();
      *request.add_prompts() = *std::move(prompt);
    }
    absl::StatusOr<v1::GenerateResponse> out = roles_.actor->Generate(request);
    if (!out.ok()) return At(out.status(), "eval " + label + ": rollout");
    v1::VerifyRequest verify;
    for (int64_t i = begin; i < end; ++i) {
      auto* item = verify.add_items();
      item->set_prompt(eval[i].prompt);
      item->set_response(out->samples(i - begin).response_text());
      item->set_answer(eval[i].answer);
    }
    absl::StatusOr<v1::VerifyResponse> verdicts = roles_.verifier->Verify(verify);
    if (!verdicts.ok()) return At(verdicts.status(), "eval " + label + ": verify");
    for (const v1::VerifierStats& s : verdicts->stats()) ledger_->RecordVerifier(s);
    for (const auto& r : verdicts->results()) {
      reward_sum += r.reward();
      correct += r.verdict() == v1::CORRECT;
    }
  }
  metrics.prompts = n;
  metrics.accuracy = n > 0 ? static_cast<double>(correct) / n : 0;
  metrics.mean_reward = n > 0 ? reward_sum / n : 0;
  ledger_->RecordEval(label, metrics);
  if (progress_ != nullptr) {
    *progress_ << absl::StrFormat("eval %-6s  accuracy %.3f  (%d held-out prompts, greedy)\n",
                                  label, metrics.accuracy, n);
    progress_->flush();
  }
  return metrics;
}

absl::Status GrpoLoop::SampleRound(int64_t step, int round, int64_t prompts, StepSamples* out,
                                  double* seconds) {
  const int64_t group = ResponsesPerPrompt(job_);
  v1::GenerateRequest request;
  request.set_responses_per_prompt(static_cast<int32_t>(group));
  *request.mutable_sampling() = TrainSampling(job_);
  // Round 0 keeps the seed a step had before dynamic sampling existed.
  const uint64_t salt = static_cast<uint64_t>(step) | (static_cast<uint64_t>(round) << 48);
  request.set_seed(MixSeed(job_.runtime().seed(), salt));
  std::vector<const data::Example*> examples;
  for (int64_t i = 0; i < prompts; ++i) {
    const data::Example& ex = train_stream_.Next();
    examples.push_back(&ex);
    absl::StatusOr<v1::Prompt> prompt = MakePrompt(ex);
    if (!prompt.ok()) return prompt.status();
    *request.add_prompts() = *std::move(prompt);
  }

  // Verification runs beside the rollout: each part the actors hand over
  // is verified while the rest is still being generated.
  std::map<uint64_t, const data::Example*> by_id;
  for (const data::Example* ex : examples) by_id[ex->id] = ex;
  StreamingVerify verifying(roles_.verifier, ledger_, std::move(by_id));
  const absl::Time rollout_start = absl::Now();
  absl::StatusOr<v1::GenerateResponse> rollout;
  {
    auto span = ledger_->Begin(Stage::kRollout, "actor-0");
    rollout = roles_.actor->GenerateStreaming(
        request, [&verifying](const v1::GenerateResponse& part) { verifying.Add(part); });
    span.End();
  }
  const absl::Time rollout_end = absl::Now();
  if (!rollout.ok()) return At(rollout.status(), "rollout");
  absl::StatusOr<StreamingVerify::Result> verified =
      verifying.Finish(rollout->samples(), rollout_end);
  if (!verified.ok()) return At(verified.status(), "verify");
  if (seconds != nullptr) *seconds += absl::ToDoubleSeconds(absl::Now() - rollout_start);
  out->verify_overlap_seconds += verified->overlap_seconds;
  const v1::VerifyResponse* verdicts = &verified->verdicts;
  out->examples.insert(out->examples.end(), examples.begin(), examples.end());
  const int64_t tokens_before = out->rollout.generated_tokens();
  out->rollout.MergeFrom(*rollout);  // appends the samples; scalars take the newest
  out->rollout.set_generated_tokens(tokens_before + rollout->generated_tokens());
  out->verdicts.MergeFrom(*verdicts);  // appends the results and this round's stats
  return absl::OkStatus();
}

absl::StatusOr<GrpoLoop::RewardSummary> GrpoLoop::SampleUsefulGroups(int64_t step,
                                                                     StepSamples* drawn,
                                                                     ledger::StepCounts& counts) {
  const v1::GrpoConfig& grpo = job_.grpo();
  const int64_t group = grpo.responses_per_prompt();
  const int64_t want = grpo.prompts_per_step();
  auto rewards_of = [&] {
    std::vector<float> rewards;
    for (const auto& r : drawn->verdicts.results()) rewards.push_back(r.reward());
    return rewards;
  };
  std::vector<bool> useful = UsefulGroups(rewards_of(), group);
  for (int round = 1; round < grpo.dapo().max_sampling_rounds(); ++round) {
    const int64_t have = std::count(useful.begin(), useful.end(), true);
    const int64_t prompts = NextRoundPrompts(want, have, static_cast<int64_t>(useful.size()));
    if (prompts == 0) break;
    double seconds = 0;
    if (absl::Status s = SampleRound(step, round, prompts, drawn, &seconds); !s.ok()) {
      return At(s, absl::StrCat("dynamic sampling round ", round));
    }
    ++counts.sampling_rounds_extra;
    counts.prompts_extra += prompts;
    counts.sampling_seconds_extra += seconds;
    useful = UsefulGroups(rewards_of(), group);
  }
  counts.samples_generated = drawn->rollout.samples_size();
  counts.generated_tokens = drawn->rollout.generated_tokens();

  // The reward and accuracy of every sample drawn: the policy's, before
  // zero-variance groups (all right or all wrong) are left out.
  RewardSummary all;
  for (const auto& r : drawn->verdicts.results()) {
    all.mean_reward += r.reward();
    all.accuracy += r.verdict() == v1::CORRECT;
  }
  const int n = drawn->verdicts.results_size();
  all.mean_reward = n > 0 ? all.mean_reward / n : 0;
  all.accuracy = n > 0 ? all.accuracy / n : 0;

  const GroupSelection selection = SelectGroups(useful, want);
  counts.samples_zero_variance += selection.zero_variance * group;
  counts.samples_surplus += selection.surplus * group;
  StepSamples kept;
  *kept.verdicts.mutable_stats() = drawn->verdicts.stats();
  kept.rollout.set_generated_tokens(drawn->rollout.generated_tokens());
  kept.rollout.set_kv_cache_bytes(drawn->rollout.kv_cache_bytes());
  for (int64_t g : selection.kept) {
    kept.examples.push_back(drawn->examples[g]);
    for (int64_t i = g * group; i < (g + 1) * group; ++i) {
      *kept.rollout.add_samples() = std::move(*drawn->rollout.mutable_samples(i));
      *kept.verdicts.add_results() = std::move(*drawn->verdicts.mutable_results(i));
    }
  }
  *drawn = std::move(kept);
  return all;
}

absl::StatusOr<learner::GroupAdvantages> GrpoLoop::SampleAdvantages(
    const std::vector<float>& rewards, std::vector<bool>& dropped, bool any_dropped) const {
  const v1::GrpoConfig& grpo = job_.grpo();
  const int64_t group = grpo.responses_per_prompt();
  const int64_t n = rewards.size();
  if (ppo_) {
    // The learner's critic and GAE give PPO's advantages.
    learner::GroupAdvantages none;
    none.advantages.assign(n, 0.0f);
    none.zero_variance.assign(n / group, false);
    return none;
  }
  absl::StatusOr<learner::AdvantageEstimator> estimator =
      learner::AdvantageEstimatorFromName(grpo.advantage_estimator());
  if (!estimator.ok()) return estimator.status();
  if (any_dropped) {
    return learner::AdvantagesWithout(*estimator, rewards, dropped, group, grpo.scale_rewards());
  }
  const std::vector<int64_t> sizes(n / group, group);
  return learner::ComputeAdvantages(*estimator, rewards, sizes, grpo.scale_rewards());
}

absl::Status GrpoLoop::Step(int64_t step) {
  const v1::GrpoConfig& grpo = job_.grpo();
  const int64_t group = grpo.responses_per_prompt();
  ledger::StepCounts counts = OpenStep(step, grpo.prompts_per_step(), group);

  StepSamples drawn;
  if (absl::Status s = SampleRound(step, 0, grpo.prompts_per_step(), &drawn, nullptr); !s.ok()) {
    return s;
  }
  counts.samples_generated = drawn.rollout.samples_size();
  counts.generated_tokens = drawn.rollout.generated_tokens();
  counts.verify_overlap_seconds = drawn.verify_overlap_seconds;
  std::optional<RewardSummary> all_rewards;
  if (grpo.dapo().dynamic_sampling()) {
    absl::StatusOr<RewardSummary> r = SampleUsefulGroups(step, &drawn, counts);
    if (!r.ok()) return r.status();
    all_rewards = *r;
  }
  counts.prompts += counts.prompts_extra;
  const auto& samples = drawn.rollout.samples();
  absl::StatusOr<v1::VerifyResponse> verdicts = std::move(drawn.verdicts);

  absl::StatusOr<v1::LogProbResponse> ref;
  const bool use_kl = grpo.kl_coef() > 0 && roles_.reference != nullptr;
  v1::LogProbRequest scored;
  if (use_kl || reward_model_) *scored.mutable_samples() = samples;
  if (use_kl) {
    auto span = ledger_->Begin(Stage::kReference, "reference-0");
    ref = roles_.reference->LogProbs(scored);
    if (!ref.ok()) return At(ref.status(), "reference");
  }
  // PPO with a reward model: its scores are the rewards; the verifier's
  // verdicts still give the accuracy.
  absl::StatusOr<v1::ScoreResponse> scores;
  if (reward_model_) {
    auto span = ledger_->Begin(Stage::kReward, "reference-0");
    scores = roles_.reference->Scores(scored);
    if (!scores.ok()) return At(scores.status(), "reward model");
    if (scores->scores_size() != samples.size()) {
      return absl::InternalError(absl::StrCat("reward model: ", scores->scores_size(),
                                              " scores for ", samples.size(), " samples"));
    }
  }

  v1::TrainBatch batch;
  {
    auto span = ledger_->Begin(Stage::kAdvantage, "scheduler");
    // verifier.timeout_policy "drop": TIMEOUT samples leave training; the
    // rest of their group is normalized without them (and a group left with
    // fewer than two samples goes too).
    const int n = samples.size();
    std::vector<bool> dropped(n, false);
    bool any_dropped = false;
    if (job_.verifier().timeout_policy() == "drop") {
      for (int i = 0; i < n; ++i) {
        dropped[i] = verdicts->results(i).verdict() == v1::TIMEOUT;
        any_dropped = any_dropped || dropped[i];
      }
    }
    std::vector<float> rewards;
    double reward_sum = 0;
    int64_t correct = 0;
    for (int i = 0; i < n; ++i) {
      rewards.push_back(reward_model_ ? scores->scores(i) : verdicts->results(i).reward());
    }
    absl::StatusOr<learner::GroupAdvantages> adv = SampleAdvantages(rewards, dropped, any_dropped);
    if (!adv.ok()) return At(adv.status(), "advantages");
    int64_t kept = 0;
    for (int i = 0; i < n; ++i) {
      if (dropped[i]) continue;
      ++kept;
      reward_sum += rewards[i];
      correct += verdicts->results(i).verdict() == v1::CORRECT;
    }
    counts.mean_reward = kept == 0 ? 0 : reward_sum / kept;
    counts.accuracy = kept == 0 ? 0 : static_cast<double>(correct) / kept;
    for (int i = 0; i < n; ++i) {
      const v1::Sample& s = samples[i];
      const v1::Verdict verdict = verdicts->results(i).verdict();
      if (dropped[i]) {
        ++counts.samples_dropped;
        continue;
      }
      if (adv->zero_variance[i / group]) {
        ++counts.samples_zero_variance;
      } else if (s.truncated()) {
        ++counts.samples_truncated;
      } else if (verdict == v1::UNPARSEABLE) {
        ++counts.samples_unparseable;
      } else if (verdict == v1::ERROR) {
        ++counts.samples_error;
      } else if (verdict == v1::TIMEOUT) {
        ++counts.samples_timeout;
      }
      if (s.truncated() && grpo.dapo().overlong_filtering()) {
        ++counts.samples_overlong;  // DAPO: no loss on a response cut off at the budget
        continue;
      }
      // PPO: every response trains (GAE gives each token an advantage).
      if (ppo_ ? !s.response_tokens().empty() : adv->advantages[i] != 0.0f) {
        ++counts.samples_effective;
      }
      if (s.response_tokens().empty()) continue;
      v1::TrainSample* t = batch.add_samples();
      *t->mutable_prompt_tokens() = s.prompt_tokens();
      *t->mutable_response_tokens() = s.response_tokens();
      *t->mutable_old_logprobs() = s.logprobs();
      if (use_kl) *t->mutable_ref_logprobs() = ref->sequences(i).logprobs();
      t->set_advantage(adv->advantages[i]);
      if (ppo_) t->set_reward(rewards[i]);
    }
    // One record per verifier per rollout round (dynamic sampling runs
    // several); the step's drops go on each verifier's first.
    std::set<std::string> named;
    for (const v1::VerifierStats& vs : verdicts->stats()) {
      v1::VerifierStats recorded = vs;
      recorded.set_dropped(named.insert(vs.verifier()).second ? counts.samples_dropped : 0);
      ledger_->RecordVerifier(recorded);
    }
  }

  if (all_rewards.has_value()) {
    // Dynamic sampling trains on groups with mixed rewards only; report the
    // policy's reward over everything it sampled.
    counts.mean_reward = all_rewards->mean_reward;
    counts.accuracy = all_rewards->accuracy;
  }

  absl::StatusOr<v1::TrainStats> stats = v1::TrainStats();
  const bool left_out = counts.samples_dropped > 0 || counts.samples_overlong > 0 ||
                        grpo.dapo().dynamic_sampling();
  if (batch.samples_size() > 0 || !left_out) {
    auto span = ledger_->Begin(Stage::kUpdate, "learner-0");
    stats = roles_.learner->TrainStep(batch);
  }  // else every sample was left out (dropped, filtered): no update this step
  if (!stats.ok()) return At(stats.status(), "update");
  RecordUpdate(*stats, &counts);

  if (absl::Status s = SyncWeights(); !s.ok()) return At(s, "weight sync");

  ledger::StepMetrics metrics = ledger_->EndStep(counts);
  history_.push_back(metrics);
  if (progress_ != nullptr) {
    const double eta = Eta(step, grpo.steps());
    *progress_ << absl::StrFormat(
        "step %4d/%d  reward %.3f  acc %.3f  effective %.2f  kl %.4f  step %.2fs  eta %.0fs%s\n",
        step + 1, grpo.steps(), counts.mean_reward, counts.accuracy,
        metrics.effective_sample_rate, counts.kl, metrics.step_seconds, eta,
        grpo.dapo().dynamic_sampling()
            ? absl::StrFormat("  rounds %d", 1 + counts.sampling_rounds_extra)
            : "");
    progress_->flush();
  }
  return absl::OkStatus();
}

ledger::StepCounts GrpoLoop::OpenStep(int64_t step, int64_t prompts, int64_t group) {
  ledger_->BeginStep(step);
  ledger::StepCounts counts;
  counts.step = step;
  counts.prompts = prompts;
  counts.responses_per_prompt = group;
  counts.policy_version = roles_.learner->policy_version();
  return counts;
}

double GrpoLoop::Eta(int64_t step, int64_t steps) const {
  double elapsed = 0;
  for (const auto& m : history_) elapsed += m.step_seconds;
  return history_.empty() ? 0 : elapsed / history_.size() * (steps - (step + 1));
}

void GrpoLoop::ResumeFrom(const LoopState& state) { resume_ = state; }

absl::Status GrpoLoop::CheckpointAfter(int64_t steps_done) {
  auto span = ledger_->Begin(Stage::kCheckpoint, "scheduler");
  LoopState state;
  state.next_step = steps_done;
  state.policy_version = roles_.learner->policy_version();
  state.seed = job_.runtime().seed();
  state.sft_position = sft_stream_.position();
  state.train_position = train_stream_.position();
  state.eval_before = eval_before_;
  state.ledger_state = ledger_->ExportState();
  // Never a checkpoint whose ledger.jsonl lacks records of its steps.
  if (absl::Status s = ledger_->status(); !s.ok()) return s;
  return WriteCheckpoint(ledger_->env(), out_dir_, state, [this](const std::string& dir) {
    return roles_.learner->SaveCheckpoint(dir);
  });
}

absl::Status GrpoLoop::Run() {
  if (data_.train.empty() || data_.eval.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the job needs train and eval examples; found ", data_.train.size(),
        " train and ", data_.eval.size(), " eval"));
  }
  int64_t first_step = 0;
  if (resume_.has_value()) {
    first_step = resume_->next_step;
    sft_stream_.Seek(resume_->sft_position);
    train_stream_.Seek(resume_->train_position);
    eval_before_ = resume_->eval_before;
    if (absl::Status s = SyncWeights(); !s.ok()) return At(s, "resumed weight sync");
    if (roles_.reference != nullptr) {
      auto span = ledger_->Begin(Stage::kCheckpoint, "reference-0");
      if (absl::Status s = roles_.reference->Load(env::RunDir(out_dir_).Reference());
          !s.ok()) {
        return At(s, "resume: loading the reference");
      }
    }
  } else {
    if (absl::Status s = SyncWeights(); !s.ok()) return At(s, "initial weight sync");
    if (absl::Status s = WarmUp(); !s.ok()) return s;
    if (absl::Status s = SyncWeights(); !s.ok()) return At(s, "post-warm-up weight sync");
    if (absl::Status s = TakeReference(); !s.ok()) return s;
    absl::StatusOr<ledger::EvalMetrics> before = Evaluate("before");
    if (!before.ok()) return before.status();
    eval_before_ = *before;
  }
  const int every = job_.runtime().checkpoint_every();
  const bool online_dpo = config::RecipeOf(job_) == config::Recipe::kOnlineDpo;
  const int64_t steps = config::RecipeSteps(job_);
  for (int64_t step = first_step; step < steps; ++step) {
    if (stop_requested_ && stop_requested_()) {
      return absl::CancelledError(absl::StrCat("cancelled before step ", step));
    }
    absl::Status s = online_dpo ? OnlineDpoStep(step) : Step(step);
    if (!s.ok()) return At(s, absl::StrCat("step ", step));
    if (every > 0 && (step + 1) % every == 0) {
      if (absl::Status s = CheckpointAfter(step + 1); !s.ok()) {
        return At(s, absl::StrCat("checkpoint after step ", step));
      }
    }
  }
  ledger_->BeginStep(steps);
  absl::StatusOr<ledger::EvalMetrics> after = Evaluate("after");
  if (!after.ok()) return after.status();
  eval_after_ = *after;
  return absl::OkStatus();
}

}  // namespace trellis::scheduler
