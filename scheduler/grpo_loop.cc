#include "scheduler/grpo_loop.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "learner/advantages.h"

namespace trellis::scheduler {
namespace {

using ledger::Stage;

// Prefixes a failure with where it happened.
absl::Status At(const absl::Status& status, absl::string_view where) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(where, ": ", status.message()));
}

// SplitMix64: a well-spread per-step sampling seed from the job seed.
uint64_t MixSeed(uint64_t seed, uint64_t salt) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (salt + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

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

// Group advantages over the samples not `dropped`: each group is normalized
// over its kept samples alone; a group with fewer than two kept samples is
// dropped whole (its samples are marked in `dropped`; a lone sample has no
// baseline to compare against). Dropped samples get advantage 0.
absl::StatusOr<learner::GroupAdvantages> GroupAdvantagesWithout(
    const std::vector<float>& rewards, std::vector<bool>& dropped, int64_t group, bool scale) {
  if (group < 1 || rewards.size() % group != 0) {
    return learner::ComputeGroupAdvantages(rewards, group, scale);  // its error
  }
  learner::GroupAdvantages out;
  out.advantages.assign(rewards.size(), 0.0f);
  for (size_t g = 0; g < rewards.size(); g += group) {
    std::vector<size_t> kept;
    for (size_t i = g; i < g + group; ++i) {
      if (!dropped[i]) kept.push_back(i);
    }
    if (kept.size() < 2) {
      for (size_t i = g; i < g + group; ++i) dropped[i] = true;
      out.zero_variance.push_back(false);
      continue;
    }
    std::vector<float> sub;
    for (size_t i : kept) sub.push_back(rewards[i]);
    absl::StatusOr<learner::GroupAdvantages> a =
        learner::ComputeGroupAdvantages(sub, static_cast<int64_t>(sub.size()), scale);
    if (!a.ok()) return a.status();
    for (size_t k = 0; k < kept.size(); ++k) out.advantages[kept[k]] = a->advantages[k];
    out.zero_variance.push_back(a->zero_variance[0]);
  }
  return out;
}

}  // namespace

GrpoLoop::GrpoLoop(const v1::JobConfig& job, Roles roles,
                   const model::Tokenizer* tokenizer, data::Split data,
                   ledger::Ledger* ledger, std::string out_dir, std::ostream* progress)
    : job_(job),
      roles_(roles),
      tokenizer_(tokenizer),
      data_(std::move(data)),
      sft_stream_(SftExamples(data_.train, job.sft().num_examples()), job.runtime().seed()),
      train_stream_(data_.train, MixSeed(job.runtime().seed(), kRlStreamSalt)),
      ledger_(ledger),
      out_dir_(std::move(out_dir)),
      progress_(progress) {}

absl::StatusOr<v1::Prompt> GrpoLoop::MakePrompt(const data::Example& example) const {
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer_->Encode(example.prompt);
  if (!ids.ok()) {
    return At(ids.status(), absl::StrCat("prompt ", example.id));
  }
  v1::Prompt prompt;
  prompt.set_id(example.id);
  prompt.set_text(example.prompt);
  prompt.set_answer(example.answer);
  prompt.add_token_ids(tokenizer_->bos_id());
  prompt.mutable_token_ids()->Add(ids->begin(), ids->end());
  return prompt;
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
  published_version_ = sent->version();
  return absl::OkStatus();
}

absl::Status GrpoLoop::WarmUp() {
  const v1::SftConfig& sft = job_.sft();
  for (int step = 0; step < sft.steps(); ++step) {
    auto span = ledger_->Begin(Stage::kSft, "learner-0");
    v1::SftBatch batch;
    for (int i = 0; i < sft.batch_size(); ++i) {
      const data::Example& ex = sft_stream_.Next();
      absl::StatusOr<v1::Prompt> prompt = MakePrompt(ex);
      if (!prompt.ok()) return prompt.status();
      absl::StatusOr<std::vector<int32_t>> target = tokenizer_->Encode(ex.answer);
      if (!target.ok()) return At(target.status(), absl::StrCat("answer of example ", ex.id));
      auto* pair = batch.add_pairs();
      *pair->mutable_prompt_tokens() = prompt->token_ids();
      pair->mutable_target_tokens()->Add(target->begin(), target->end());
      pair->add_target_tokens(tokenizer_->eos_id());
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
  auto span = ledger_->Begin(Stage::kCheckpoint, "learner-0");
  const std::string path = out_dir_ + "/reference.safetensors";
  if (absl::Status s = roles_.learner->SaveWeights(path); !s.ok()) {
    return At(s, "saving the reference weights");
  }
  return At(roles_.reference->Load(path), "loading the reference");
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

absl::Status GrpoLoop::Step(int64_t step) {
  const v1::GrpoConfig& grpo = job_.grpo();
  const int64_t group = grpo.responses_per_prompt();
  ledger_->BeginStep(step);
  ledger::StepCounts counts;
  counts.step = step;
  counts.prompts = grpo.prompts_per_step();
  counts.responses_per_prompt = group;

  v1::GenerateRequest request;
  request.set_responses_per_prompt(static_cast<int32_t>(group));
  *request.mutable_sampling() = TrainSampling(job_);
  request.set_seed(MixSeed(job_.runtime().seed(), static_cast<uint64_t>(step)));
  std::vector<const data::Example*> examples;
  for (int i = 0; i < grpo.prompts_per_step(); ++i) {
    const data::Example& ex = train_stream_.Next();
    examples.push_back(&ex);
    absl::StatusOr<v1::Prompt> prompt = MakePrompt(ex);
    if (!prompt.ok()) return prompt.status();
    *request.add_prompts() = *std::move(prompt);
  }

  absl::StatusOr<v1::GenerateResponse> rollout;
  {
    auto span = ledger_->Begin(Stage::kRollout, "actor-0");
    rollout = roles_.actor->Generate(request);
  }
  if (!rollout.ok()) return At(rollout.status(), "rollout");
  const auto& samples = rollout->samples();
  counts.samples_generated = samples.size();
  counts.generated_tokens = rollout->generated_tokens();
  counts.policy_version = roles_.learner->policy_version();

  absl::StatusOr<v1::VerifyResponse> verdicts;
  {
    auto span = ledger_->Begin(Stage::kVerify, "verifier-0");
    v1::VerifyRequest verify;
    for (int i = 0; i < samples.size(); ++i) {
      const data::Example& ex = *examples[i / group];
      auto* item = verify.add_items();
      item->set_prompt(ex.prompt);
      item->set_response(samples[i].response_text());
      item->set_answer(ex.answer);
    }
    verdicts = roles_.verifier->Verify(verify);
  }
  if (!verdicts.ok()) return At(verdicts.status(), "verify");
  if (verdicts->results_size() != samples.size()) {
    return absl::InternalError(absl::StrCat("verify: ", verdicts->results_size(),
                                            " results for ", samples.size(), " samples"));
  }

  absl::StatusOr<v1::LogProbResponse> ref;
  const bool use_kl = grpo.kl_coef() > 0 && roles_.reference != nullptr;
  if (use_kl) {
    auto span = ledger_->Begin(Stage::kReference, "reference-0");
    v1::LogProbRequest lp;
    *lp.mutable_samples() = samples;
    ref = roles_.reference->LogProbs(lp);
    if (!ref.ok()) return At(ref.status(), "reference");
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
    for (const auto& r : verdicts->results()) rewards.push_back(r.reward());
    absl::StatusOr<learner::GroupAdvantages> adv =
        any_dropped ? GroupAdvantagesWithout(rewards, dropped, group, grpo.scale_rewards())
                    : learner::ComputeGroupAdvantages(rewards, group, grpo.scale_rewards());
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
      if (adv->advantages[i] != 0.0f) ++counts.samples_effective;
      if (s.response_tokens().empty()) continue;
      v1::TrainSample* t = batch.add_samples();
      *t->mutable_prompt_tokens() = s.prompt_tokens();
      *t->mutable_response_tokens() = s.response_tokens();
      *t->mutable_old_logprobs() = s.logprobs();
      if (use_kl) *t->mutable_ref_logprobs() = ref->sequences(i).logprobs();
      t->set_advantage(adv->advantages[i]);
    }
    for (const v1::VerifierStats& vs : verdicts->stats()) {
      v1::VerifierStats recorded = vs;
      recorded.set_dropped(counts.samples_dropped);
      ledger_->RecordVerifier(recorded);
    }
  }

  absl::StatusOr<v1::TrainStats> stats = v1::TrainStats();
  if (batch.samples_size() > 0 || counts.samples_dropped == 0) {
    auto span = ledger_->Begin(Stage::kUpdate, "learner-0");
    stats = roles_.learner->TrainStep(batch);
  }  // else every sample was dropped: no update this step
  if (!stats.ok()) return At(stats.status(), "update");
  counts.trained_tokens = stats->trained_tokens();
  counts.loss = stats->loss();
  counts.kl = stats->kl();
  counts.clip_fraction = stats->clip_fraction();
  counts.grad_norm = stats->grad_norm();

  if (absl::Status s = SyncWeights(); !s.ok()) return At(s, "weight sync");

  ledger::StepMetrics metrics = ledger_->EndStep(counts);
  history_.push_back(metrics);
  if (progress_ != nullptr) {
    double elapsed = 0;
    for (const auto& m : history_) elapsed += m.step_seconds;
    const double eta = elapsed / history_.size() * (grpo.steps() - (step + 1));
    *progress_ << absl::StrFormat(
        "step %4d/%d  reward %.3f  acc %.3f  effective %.2f  kl %.4f  step %.2fs  eta %.0fs\n",
        step + 1, grpo.steps(), counts.mean_reward, counts.accuracy,
        metrics.effective_sample_rate, counts.kl, metrics.step_seconds, eta);
    progress_->flush();
  }
  return absl::OkStatus();
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
  return WriteCheckpoint(out_dir_, state, [this](const std::string& dir) {
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
      if (absl::Status s = roles_.reference->Load(out_dir_ + "/reference.safetensors");
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
  for (int64_t step = first_step; step < job_.grpo().steps(); ++step) {
    if (stop_requested_ && stop_requested_()) {
      return absl::CancelledError(absl::StrCat("cancelled before step ", step));
    }
    if (absl::Status s = Step(step); !s.ok()) return At(s, absl::StrCat("step ", step));
    if (every > 0 && (step + 1) % every == 0) {
      if (absl::Status s = CheckpointAfter(step + 1); !s.ok()) {
        return At(s, absl::StrCat("checkpoint after step ", step));
      }
    }
  }
  ledger_->BeginStep(job_.grpo().steps());
  absl::StatusOr<ledger::EvalMetrics> after = Evaluate("after");
  if (!after.ok()) return after.status();
  eval_after_ = *after;
  return absl::OkStatus();
}

}  // namespace trellis::scheduler
