#include "loop/driver.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "config/recipe.h"
#include "config/worker_id.h"
#include "env/run_dir.h"
#include "ledger/memory_limit.h"
#include "loop/loop_util.h"
#include "loop/reward_rule.h"
#include "loop/streaming_verify.h"

namespace trellis::loop {
namespace {

// memory.process_memory_limit_bytes against this process's measured peak
// (ledger/memory_limit.h), after every step.
absl::Status CheckMemoryLimit(ledger::Ledger& ledger, const v1::JobConfig& job) {
  return ledger::CheckProcessMemoryLimit(ledger, job.memory().process_memory_limit_bytes(),
                                         "the process running the loop (under `trellis run`, "
                                         "every role)");
}

using ledger::Stage;

// Salt of the RL prompt stream's seed, so that it does not replay the SFT
// stream's order. (Per-step sampling seeds use the step number as salt.)
constexpr uint64_t kRlStreamSalt = 1ULL << 40;

std::vector<data::Example> SftExamples(const std::vector<data::Example>& train, int limit) {
  if (limit <= 0 || static_cast<size_t>(limit) >= train.size()) return train;
  return std::vector<data::Example>(train.begin(), train.begin() + limit);
}

}  // namespace

Driver::Driver(const v1::JobConfig& job, Roles roles, const PromptFormat* format, data::Split data,
               ledger::Ledger* ledger, std::string out_dir, std::ostream* progress,
               const RecipeRegistry* registry)
    : job_(job),
      roles_(Metered(roles, ledger, metered_learner_, metered_reference_)),
      format_(format),
      data_(std::move(data)),
      registry_(registry != nullptr ? *registry : BuiltinRecipes()),
      sft_stream_(SftExamples(data_.train, job.sft().num_examples()), job.runtime().seed()),
      train_stream_(data_.train, MixSeed(job.runtime().seed(), kRlStreamSalt)),
      ledger_(ledger),
      out_dir_(std::move(out_dir)),
      progress_(progress) {
  if (job.async().enabled() && job.async().partial_rollout() != v1::AsyncConfig::FINISH) {
    partial_ = std::make_unique<PartialRollouts>(job.async().partial_rollout(),
                                                 job.grpo().prompts_per_step(),
                                                 job.async().rollout_overdraw());
  }
}

Driver::~Driver() = default;

void Driver::Print(const std::string& line) const {
  if (progress_ == nullptr || line.empty()) return;
  *progress_ << line;
  progress_->flush();
}

double Driver::Eta(int64_t step, int64_t steps) const {
  double elapsed = 0;
  for (const auto& m : history_) elapsed += m.step_seconds;
  return history_.empty() ? 0 : elapsed / history_.size() * (steps - (step + 1));
}

std::string Driver::Headline() const { return recipe_->Headline(eval_before_, eval_after_); }

absl::Status Driver::SyncWeights() {
  if (absl::Status s = Publish(); !s.ok()) return s;
  return LoadWeights();
}

absl::Status Driver::Publish() {
  absl::MutexLock lock(&handoff_mu_);
  if (roles_.learner->policy_version() == published_version_) return absl::OkStatus();
  auto span = ledger_->Begin(Stage::kWeightSync, config::WorkerId(v1::SCHEDULER).ToString());
  absl::StatusOr<v1::WeightSyncStats> sent = roles_.learner->PublishWeights();
  if (!sent.ok()) return At(sent.status(), "publishing weights");
  published_ = *sent;
  published_version_ = sent->version();
  return absl::OkStatus();
}

absl::Status Driver::LoadWeights() {
  absl::MutexLock lock(&handoff_mu_);
  if (actor_version_ == published_version_) return absl::OkStatus();
  auto span = ledger_->Begin(Stage::kWeightSync, config::WorkerId(v1::SCHEDULER).ToString());
  const v1::WeightSyncStats& sent = published_;
  absl::StatusOr<v1::WeightSyncStats> got = roles_.actor->SyncWeights(sent.version());
  if (!got.ok()) return At(got.status(), "actor weight sync");
  v1::WeightSyncStats handoff = sent;
  handoff.set_transfer_seconds(sent.transfer_seconds() + got->transfer_seconds());
  handoff.set_load_seconds(got->load_seconds());
  // The learner group's rank 0 publishes.
  const std::string learner = config::WorkerId(v1::LEARNER).ToString();
  ledger_->RecordHandoff(learner, handoff);
  // The publisher keeps the newest version's buckets staged for receivers;
  // while it packs a new version the previous one is still staged.
  if (actor_version_ >= 0) {
    ledger_->RecordObject(learner, ledger::Object::kCommunication, 2 * sent.bytes(),
                          Stage::kWeightSync);
  }
  ledger_->RecordObject(learner, ledger::Object::kCommunication, sent.bytes(), Stage::kWeightSync);
  actor_version_ = sent.version();
  return absl::OkStatus();
}

absl::Status Driver::WarmUp() {
  const v1::SftConfig& sft = job_.sft();
  for (int step = 0; step < sft.steps(); ++step) {
    auto span = ledger_->Begin(Stage::kSft, config::WorkerId(v1::LEARNER).ToString());
    v1::SftBatch batch;
    for (int i = 0; i < sft.batch_size(); ++i) {
      absl::StatusOr<v1::SftBatch::Pair> pair = format_->MakeSftPair(sft_stream_.Next());
      if (!pair.ok()) return pair.status();
      *batch.add_pairs() = *std::move(pair);
    }
    absl::StatusOr<v1::TrainStats> stats = roles_.learner->SftStep(batch);
    if (!stats.ok()) return At(stats.status(), absl::StrCat("sft step ", step));
    if (absl::Status s = CheckMemoryLimit(*ledger_, job_); !s.ok()) return s;
    const bool reached =
        sft.target_accuracy() > 0 && stats->sequence_accuracy() >= sft.target_accuracy();
    if ((step + 1) % 20 == 0 || reached) {
      Print(absl::StrFormat("sft %4d/%d  loss %.4f  batch exact-match %.3f%s\n", step + 1,
                            sft.steps(), stats->loss(), stats->sequence_accuracy(),
                            reached ? "  (sft.target_accuracy reached)" : ""));
    }
    if (reached) break;
  }
  return absl::OkStatus();
}

absl::Status Driver::TakeReference() {
  const std::string path = env::RunDir(out_dir_).Reference();
  auto span = ledger_->Begin(Stage::kCheckpoint, config::WorkerId(v1::LEARNER).ToString());
  if (absl::Status s = roles_.learner->SaveWeights(path); !s.ok()) {
    return At(s, "saving the reference weights");
  }
  return At(roles_.reference->Load(path), "loading the reference");
}

absl::Status Driver::PrepareRollouts() {
  if (absl::Status s = SyncWeights(); !s.ok()) return At(s, "initial weight sync");
  if (absl::Status s = WarmUp(); !s.ok()) return s;
  if (absl::Status s = SyncWeights(); !s.ok()) return At(s, "post-warm-up weight sync");
  // A distill teacher is no copy of the policy: it loaded its own weights.
  if (roles_.reference == nullptr || config::ReferenceIsTeacher(job_)) return absl::OkStatus();
  return TakeReference();
}

absl::Status Driver::CheckpointAfter(int64_t steps_done) {
  auto span = ledger_->Begin(Stage::kCheckpoint, config::WorkerId(v1::SCHEDULER).ToString());
  LoopState state;
  state.next_step = steps_done;
  state.policy_version = roles_.learner->policy_version();
  state.seed = job_.runtime().seed();
  state.sft_position = sft_stream_.position();
  // The prompts drawn ahead for later steps are not in the checkpoint: the
  // resumed run draws them again (replays them) from the stream.
  // Partial rollout's groups in flight before that draw stay in it.
  const std::optional<StreamMark> ahead =
      pipeline_ != nullptr ? pipeline_->MarkBefore(steps_done) : std::nullopt;
  const StreamMark mark = ahead.has_value() ? *ahead : Mark();
  state.train_position = mark.position;
  state.train_in_flight = mark.in_flight;
  {
    absl::MutexLock lock(&account_mu_);
    state.prompt_account = account_;
  }
  const auto kept = static_cast<int64_t>(mark.in_flight.size());
  state.prompt_account.drawn -= state.prompt_account.in_flight - kept;
  state.prompt_account.in_flight = kept;
  state.eval_before = eval_before_;
  state.ledger_state = ledger_->ExportState();
  if (!write_checkpoint_) {
    return absl::FailedPreconditionError(absl::StrCat("runtime.checkpoint_every is ",
                                                      job_.runtime().checkpoint_every(),
                                                      " but the run has no checkpoint writer"));
  }
  return write_checkpoint_(state);
}

absl::Status Driver::Resume() {
  sft_stream_.Seek(resume_->sft_position);
  train_stream_.Seek(resume_->train_position);
  {
    absl::MutexLock lock(&account_mu_);
    account_ = resume_->prompt_account;
    if (!resume_->train_in_flight.empty() && partial_ == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "resume: the checkpoint has ", resume_->train_in_flight.size(),
          " prompts in flight (async.partial_rollout), but this job's async.partial_rollout is "
          "FINISH: resume with the checkpoint's job"));
    }
    // The groups partial rollout had in flight start afresh.
    for (uint64_t position : resume_->train_in_flight) {
      CarriedGroup group;
      group.position = position;
      group.example = &train_stream_.At(position);
      absl::StatusOr<v1::Prompt> prompt = format_->MakePrompt(*group.example);
      if (!prompt.ok()) return At(prompt.status(), "resume: a prompt in flight");
      group.prompt = *std::move(prompt);
      partial_->Add(std::move(group));
    }
  }
  eval_before_ = resume_->eval_before;
  if (absl::Status s = SyncWeights(); !s.ok()) return At(s, "resumed weight sync");
  if (roles_.reference == nullptr || config::ReferenceIsTeacher(job_)) return absl::OkStatus();
  auto span = ledger_->Begin(Stage::kCheckpoint, config::WorkerId(v1::REFERENCE).ToString());
  return At(roles_.reference->Load(env::RunDir(out_dir_).Reference()),
            "resume: loading the reference");
}

absl::Status Driver::RunStep(int64_t step) {
  ledger_->BeginStep(step);
  ledger::StepCounts counts;
  counts.step = step;
  counts.policy_version = roles_.learner->policy_version();
  if (absl::Status s = recipe_->Step(step, counts); !s.ok()) return s;
  if (spec_->rolls_out) {
    if (absl::Status s = Account(counts); !s.ok()) return s;
    if (pipeline_ != nullptr) {
      // The actors load the new version before their next rollout.
      if (absl::Status s = Publish(); !s.ok()) return At(s, "weight sync");
      pipeline_->Trained(step);
    } else if (absl::Status s = SyncWeights(); !s.ok()) {
      return At(s, "weight sync");
    }
  }
  history_.push_back(ledger_->EndStep(counts));
  Print(recipe_->Progress(step, counts, history_.back()));
  return CheckMemoryLimit(*ledger_, job_);
}

absl::Status Driver::Run() {
  const absl::Status s = RunRecipe();
  AnnounceClipping();
  return s;
}

absl::Status Driver::RunRecipe() {
  absl::StatusOr<const RecipeSpec*> spec = registry_.Find(job_.algorithm());
  if (!spec.ok()) return spec.status();
  spec_ = *spec;
  absl::StatusOr<std::unique_ptr<Recipe>> recipe = spec_->create(*this);
  if (!recipe.ok()) return recipe.status();
  recipe_ = *std::move(recipe);
  if (spec_->rolls_out && (data_.train.empty() || data_.eval.empty())) {
    return absl::FailedPreconditionError(
        absl::StrCat("the job needs train and eval examples; found ", data_.train.size(),
                     " train and ", data_.eval.size(), " eval"));
  }
  if (spec_->rolls_out && !job_.environment().name().empty() && roles_.environment == nullptr) {
    return NoEnvironment();
  }
  int64_t first_step = 0;
  if (resume_.has_value()) {
    first_step = resume_->next_step;
    if (absl::Status s = Resume(); !s.ok()) return s;
  } else {
    if (absl::Status s = recipe_->Prepare(); !s.ok()) return s;
    absl::StatusOr<ledger::EvalMetrics> before = recipe_->Evaluate("before");
    if (!before.ok()) return before.status();
    eval_before_ = *before;
  }
  const int every = job_.runtime().checkpoint_every();
  const int64_t eval_every = recipe_->eval_every();
  const int64_t steps = spec_->steps(job_);
  for (int64_t step = first_step; step < steps; ++step) {
    if (stop_requested_ && stop_requested_()) {
      return absl::CancelledError(absl::StrCat("cancelled before step ", step));
    }
    if (absl::Status s = RunStep(step); !s.ok()) return At(s, absl::StrCat("step ", step));
    const bool last = step + 1 == steps;
    if (eval_every > 0 && (step + 1) % eval_every == 0 && !last) {
      absl::StatusOr<ledger::EvalMetrics> mid = recipe_->Evaluate(absl::StrCat("step_", step + 1));
      if (!mid.ok()) return mid.status();
    }
    if (every > 0 && (step + 1) % every == 0) {
      if (absl::Status s = CheckpointAfter(step + 1); !s.ok()) {
        return At(s, absl::StrCat("checkpoint after step ", step));
      }
    }
  }
  pipeline_.reset();  // every step sampled and taken
  if (spec_->rolls_out) {
    if (absl::Status s = LoadWeights(); !s.ok()) return At(s, "final weight sync");
  }
  ledger_->BeginStep(steps);
  absl::StatusOr<ledger::EvalMetrics> after = recipe_->Evaluate("after");
  if (!after.ok()) return after.status();
  eval_after_ = *after;
  return absl::OkStatus();
}

}  // namespace trellis::loop
