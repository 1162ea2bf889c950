#include "scheduler/offline_loop.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "config/recipe.h"
#include "env/run_dir.h"
#include "scheduler/loop_util.h"

namespace trellis::scheduler {
namespace {

using ledger::Stage;

// Salt of the seed the arithmetic pairs' wrong answers are drawn from.
constexpr uint64_t kPairSalt = 1ULL << 41;

// Sums of a batch's evaluations, weighted by what each measured over.
struct EvalSums {
  double weight = 0;
  double loss = 0;
  double accuracy = 0;
  double margin = 0;
  int64_t rows = 0;
  // `weight`: tokens for an SFT loss (token mean), pairs for a preference
  // loss (mean over pairs).
  void Add(const v1::TrainStats& s, int64_t rows_in_batch, double weight_of_loss, double accuracy_of_rows) {
    weight += weight_of_loss;
    loss += s.loss() * weight_of_loss;
    accuracy += accuracy_of_rows * rows_in_batch;
    margin += s.reward_margin() * rows_in_batch;
    rows += rows_in_batch;
  }
};

double Sum(const google::protobuf::RepeatedField<float>& values) {
  double sum = 0;
  for (float v : values) sum += v;
  return sum;
}

// The first `limit` items (all when limit is 0).
template <typename T>
std::vector<T> Head(const std::vector<T>& items, int64_t limit) {
  if (limit <= 0 || static_cast<size_t>(limit) >= items.size()) return items;
  return std::vector<T>(items.begin(), items.begin() + limit);
}

}  // namespace

bool IsOfflineRecipe(const v1::JobConfig& job) {
  return config::IsOffline(config::RecipeOf(job));
}

OfflineLoop::PairTraining OfflineLoop::Training() const {
  if (reward_model_) {
    const v1::RewardModelConfig& rm = job_.reward_model();
    return {rm.steps(), rm.batch_size(), rm.eval_every(), rm.eval_pairs()};
  }
  const v1::DpoConfig& dpo = job_.dpo();
  return {dpo.steps(), dpo.batch_size(), dpo.eval_every(), dpo.eval_pairs()};
}

OfflineLoop::OfflineLoop(const v1::JobConfig& job, Roles roles,
                         const model::Tokenizer* tokenizer, data::Split data,
                         ledger::Ledger* ledger, std::string out_dir, std::ostream* progress)
    : job_(job),
      reward_model_(config::RecipeOf(job) == config::Recipe::kRewardModel),
      roles_(roles),
      tokenizer_(tokenizer),
      data_(std::move(data)),
      ledger_(ledger),
      out_dir_(std::move(out_dir)),
      progress_(progress) {}

absl::Status OfflineLoop::Run() {
  return config::RecipeOf(job_) == config::Recipe::kSft ? RunSft() : RunPairs();
}

bool OfflineLoop::Cancelled(int64_t step, absl::Status* status) const {
  if (!stop_requested_ || !stop_requested_()) return false;
  *status = absl::CancelledError(absl::StrCat("cancelled before step ", step));
  return true;
}

void OfflineLoop::EndStep(int64_t step, int64_t steps, ledger::StepCounts& counts) {
  counts.step = step;
  history_.push_back(ledger_->EndStep(counts));
  const int64_t every = std::max<int64_t>(1, steps / 10);
  const bool sft = config::RecipeOf(job_) == config::Recipe::kSft;
  if (progress_ == nullptr || ((step + 1) % every != 0 && step + 1 != steps)) return;
  *progress_ << absl::StrFormat("step %4d/%d  loss %.4f  %s %.3f%s  step %.3fs\n", step + 1,
                                steps, counts.loss,
                                sft ? "exact-match" : "pref-acc", counts.accuracy,
                                !sft
                                    ? absl::StrFormat("  margin %.3f", counts.reward_margin)
                                    : "",
                                history_.back().step_seconds);
  progress_->flush();
}

// ------------------------------------------------------------------ SFT

absl::StatusOr<ledger::EvalMetrics> OfflineLoop::EvaluateSft(const std::string& label) {
  auto span = ledger_->Begin(Stage::kEval, "scheduler");
  const std::vector<data::Example> eval = Head(data_.eval, job_.eval().num_prompts());
  EvalSums sums;
  for (size_t begin = 0; begin < eval.size(); begin += job_.eval().batch_size()) {
    const size_t end = std::min(eval.size(), begin + job_.eval().batch_size());
    v1::SftBatch batch;
    for (size_t i = begin; i < end; ++i) {
      absl::StatusOr<v1::SftBatch::Pair> pair = MakeSftPair(*tokenizer_, eval[i]);
      if (!pair.ok()) return At(pair.status(), "eval " + label);
      *batch.add_pairs() = *std::move(pair);
    }
    absl::StatusOr<v1::TrainStats> stats = roles_.learner->EvalSft(batch);
    if (!stats.ok()) return At(stats.status(), "eval " + label);
    sums.Add(*stats, end - begin, stats->trained_tokens(), stats->sequence_accuracy());
  }
  ledger::EvalMetrics metrics;
  metrics.prompts = sums.rows;
  metrics.accuracy = sums.rows > 0 ? sums.accuracy / sums.rows : 0;
  metrics.loss = sums.weight > 0 ? sums.loss / sums.weight : 0;
  ledger_->RecordEval(label, metrics);
  if (progress_ != nullptr) {
    *progress_ << absl::StrFormat(
        "eval %-6s  loss %.4f  exact-match %.3f  (%d held-out examples, answer tokens)\n", label,
        *metrics.loss, metrics.accuracy, metrics.prompts);
    progress_->flush();
  }
  return metrics;
}

absl::Status OfflineLoop::RunSft() {
  if (data_.train.empty() || data_.eval.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the sft job needs train and eval examples; found ", data_.train.size(), " train and ",
        data_.eval.size(), " eval"));
  }
  const v1::SftConfig& sft = job_.sft();
  data::PromptStream stream(Head(data_.train, sft.num_examples()), job_.runtime().seed());
  absl::StatusOr<ledger::EvalMetrics> before = EvaluateSft("before");
  if (!before.ok()) return before.status();
  eval_before_ = *before;
  for (int64_t step = 0; step < sft.steps(); ++step) {
    if (absl::Status s; Cancelled(step, &s)) return s;
    ledger_->BeginStep(step);
    ledger::StepCounts counts;
    counts.policy_version = roles_.learner->policy_version();
    counts.prompts = sft.batch_size();
    v1::SftBatch batch;
    for (int i = 0; i < sft.batch_size(); ++i) {
      absl::StatusOr<v1::SftBatch::Pair> pair = MakeSftPair(*tokenizer_, stream.Next());
      if (!pair.ok()) return At(pair.status(), absl::StrCat("step ", step));
      *batch.add_pairs() = *std::move(pair);
    }
    absl::StatusOr<v1::TrainStats> stats;
    {
      auto span = ledger_->Begin(Stage::kSft, "learner-0");
      stats = roles_.learner->SftStep(batch);
    }
    if (!stats.ok()) return At(stats.status(), absl::StrCat("step ", step, ": update"));
    RecordUpdate(*stats, &counts);
    counts.accuracy = stats->sequence_accuracy();
    EndStep(step, sft.steps(), counts);
  }
  ledger_->BeginStep(sft.steps());
  absl::StatusOr<ledger::EvalMetrics> after = EvaluateSft("after");
  if (!after.ok()) return after.status();
  eval_after_ = *after;
  return absl::OkStatus();
}

// ------------------------------------------------------------------ DPO

absl::Status OfflineLoop::LoadPairs() {
  auto span = ledger_->Begin(Stage::kLoad, "scheduler");
  const v1::DataConfig& d = job_.data();
  data::PreferenceSplit split;
  if (d.preference_train_path().empty()) {
    const uint64_t seed = MixSeed(job_.runtime().seed(), kPairSalt);
    split.train = data::ArithmeticPreferences(data_.train, seed);
    split.eval = data::ArithmeticPreferences(data_.eval, seed + 1);
  } else {
    for (auto [path, out] : {std::pair{&d.preference_train_path(), &split.train},
                             std::pair{&d.preference_eval_path(), &split.eval}}) {
      absl::StatusOr<std::vector<data::PreferencePair>> pairs = data::ReadPreferenceJsonl(*path);
      if (!pairs.ok()) return pairs.status();
      *out = *std::move(pairs);
    }
  }
  split.eval = Head(split.eval, Training().eval_pairs);
  for (auto [from, to] : {std::pair{&split.train, &train_pairs_},
                          std::pair{&split.eval, &eval_pairs_}}) {
    for (const data::PreferencePair& pair : *from) {
      data::Example ex;
      ex.id = pair.id;
      ex.prompt = pair.prompt;
      absl::StatusOr<v1::Prompt> prompt = MakePrompt(*tokenizer_, ex);
      if (!prompt.ok()) return prompt.status();
      absl::StatusOr<std::vector<int32_t>> chosen =
          ResponseTokens(*tokenizer_, pair.chosen, absl::StrCat("chosen of pair ", pair.id));
      if (!chosen.ok()) return chosen.status();
      absl::StatusOr<std::vector<int32_t>> rejected =
          ResponseTokens(*tokenizer_, pair.rejected, absl::StrCat("rejected of pair ", pair.id));
      if (!rejected.ok()) return rejected.status();
      v1::PreferencePair& p = to->emplace_back();
      *p.mutable_prompt_tokens() = prompt->token_ids();
      p.mutable_chosen_tokens()->Add(chosen->begin(), chosen->end());
      p.mutable_rejected_tokens()->Add(rejected->begin(), rejected->end());
    }
  }
  if (train_pairs_.empty() || eval_pairs_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the ", job_.algorithm(), " job needs train and held-out preference pairs; found ",
        train_pairs_.size(),
        " train and ", eval_pairs_.size(), " held-out"));
  }
  return absl::OkStatus();
}

absl::Status OfflineLoop::ScorePairs(std::vector<v1::PreferencePair*> pairs) {
  for (v1::PreferencePair* pair : pairs) {
    v1::LogProbRequest request;
    for (const auto* response : {&pair->chosen_tokens(), &pair->rejected_tokens()}) {
      v1::Sample* s = request.add_samples();
      *s->mutable_prompt_tokens() = pair->prompt_tokens();
      *s->mutable_response_tokens() = *response;
    }
    absl::StatusOr<v1::LogProbResponse> ref = roles_.reference->LogProbs(request);
    if (!ref.ok()) return At(ref.status(), "reference");
    if (ref->sequences_size() != 2) {
      return absl::InternalError(
          absl::StrCat("reference: ", ref->sequences_size(), " log-prob rows for 2 responses"));
    }
    pair->set_ref_chosen_logprob(Sum(ref->sequences(0).logprobs()));
    pair->set_ref_rejected_logprob(Sum(ref->sequences(1).logprobs()));
  }
  return absl::OkStatus();
}

absl::StatusOr<ledger::EvalMetrics> OfflineLoop::EvaluatePairs(const std::string& label) {
  if (!reward_model_ && job_.dpo().reference_logprobs() == "on_the_fly") {
    auto span = ledger_->Begin(Stage::kReference, "reference-0");
    std::vector<v1::PreferencePair*> pairs;
    for (v1::PreferencePair& p : eval_pairs_) pairs.push_back(&p);
    if (absl::Status s = ScorePairs(pairs); !s.ok()) return At(s, "eval " + label);
  }
  auto span = ledger_->Begin(Stage::kEval, "scheduler");
  EvalSums sums;
  const size_t n = eval_pairs_.size();
  for (size_t begin = 0; begin < n; begin += job_.eval().batch_size()) {
    const size_t end = std::min(n, begin + job_.eval().batch_size());
    v1::PreferenceBatch batch;
    for (size_t i = begin; i < end; ++i) *batch.add_pairs() = eval_pairs_[i];
    absl::StatusOr<v1::TrainStats> stats = roles_.learner->EvalPreference(batch);
    if (!stats.ok()) return At(stats.status(), "eval " + label);
    sums.Add(*stats, end - begin, end - begin, stats->preference_accuracy());
  }
  ledger::EvalMetrics metrics;
  metrics.prompts = sums.rows;
  metrics.accuracy = sums.accuracy / sums.rows;
  metrics.loss = sums.loss / sums.weight;
  metrics.reward_margin = sums.margin / sums.rows;
  ledger_->RecordEval(label, metrics);
  if (progress_ != nullptr) {
    *progress_ << absl::StrFormat(
        "eval %-8s  preference accuracy %.3f  reward margin %.4f  loss %.4f  (%d held-out "
        "pairs)\n",
        label, metrics.accuracy, *metrics.reward_margin, *metrics.loss, metrics.prompts);
    progress_->flush();
  }
  return metrics;
}

absl::Status OfflineLoop::RunPairs() {
  if (!reward_model_ && roles_.reference == nullptr) {
    return absl::FailedPreconditionError("the dpo job needs a reference role");
  }
  if (absl::Status s = LoadPairs(); !s.ok()) return s;
  if (!reward_model_) {
    if (absl::Status s = TakeReference(*roles_.learner, *roles_.reference, *ledger_,
                                       env::RunDir(out_dir_).Reference());
        !s.ok()) {
      return s;
    }
  }
  const PairTraining training = Training();
  // dpo's reference log-probs: all at once before training ("cached") or
  // per step. A reward model needs none.
  const bool cached = !reward_model_ && job_.dpo().reference_logprobs() == "cached";
  const bool per_step = !reward_model_ && !cached;
  if (cached) {
    auto span = ledger_->Begin(Stage::kReferenceCache, "reference-0");
    std::vector<v1::PreferencePair*> all;
    for (auto* pairs : {&train_pairs_, &eval_pairs_}) {
      for (v1::PreferencePair& p : *pairs) all.push_back(&p);
    }
    if (absl::Status s = ScorePairs(all); !s.ok()) return At(s, "caching reference log-probs");
    span.End();
    if (progress_ != nullptr) {
      *progress_ << "reference log-probs of " << all.size() << " pairs cached\n";
    }
  }
  absl::StatusOr<ledger::EvalMetrics> before = EvaluatePairs("before");
  if (!before.ok()) return before.status();
  eval_before_ = *before;

  std::vector<data::Example> ids(train_pairs_.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i].id = i;
  data::PromptStream stream(std::move(ids), job_.runtime().seed());
  for (int64_t step = 0; step < training.steps; ++step) {
    if (absl::Status s; Cancelled(step, &s)) return s;
    ledger_->BeginStep(step);
    ledger::StepCounts counts;
    counts.policy_version = roles_.learner->policy_version();
    counts.prompts = training.batch_size;
    std::vector<size_t> drawn;
    for (int i = 0; i < training.batch_size; ++i) drawn.push_back(stream.Next().id);
    if (per_step) {
      auto span = ledger_->Begin(Stage::kReference, "reference-0");
      std::vector<v1::PreferencePair*> pairs;
      for (size_t i : drawn) pairs.push_back(&train_pairs_[i]);
      if (absl::Status s = ScorePairs(pairs); !s.ok()) return At(s, absl::StrCat("step ", step));
    }
    v1::PreferenceBatch batch;
    for (size_t i : drawn) *batch.add_pairs() = train_pairs_[i];
    absl::StatusOr<v1::TrainStats> stats;
    {
      auto span = ledger_->Begin(Stage::kUpdate, "learner-0");
      stats = roles_.learner->PreferenceStep(batch);
    }
    if (!stats.ok()) return At(stats.status(), absl::StrCat("step ", step, ": update"));
    RecordUpdate(*stats, &counts);
    counts.accuracy = stats->preference_accuracy();
    EndStep(step, training.steps, counts);
    const bool last = step + 1 == training.steps;
    if (training.eval_every > 0 && (step + 1) % training.eval_every == 0 && !last) {
      absl::StatusOr<ledger::EvalMetrics> mid = EvaluatePairs(absl::StrCat("step_", step + 1));
      if (!mid.ok()) return mid.status();
    }
  }
  ledger_->BeginStep(training.steps);
  absl::StatusOr<ledger::EvalMetrics> after = EvaluatePairs("after");
  if (!after.ok()) return after.status();
  eval_after_ = *after;
  return absl::OkStatus();
}

std::string OfflineLoop::Headline() const {
  if (config::RecipeOf(job_) != config::Recipe::kSft) {
    return absl::StrFormat(
        "held-out preference accuracy: before %.3f  after %.3f  (reward margin %.4f -> %.4f, "
        "loss %.4f -> %.4f)\n",
        eval_before_.accuracy, eval_after_.accuracy, eval_before_.reward_margin.value_or(0),
        eval_after_.reward_margin.value_or(0), eval_before_.loss.value_or(0),
        eval_after_.loss.value_or(0));
  }
  return absl::StrFormat(
      "held-out loss (answer tokens): before %.4f  after %.4f  (exact match %.3f -> %.3f)\n",
      eval_before_.loss.value_or(0), eval_after_.loss.value_or(0), eval_before_.accuracy,
      eval_after_.accuracy);
}

}  // namespace trellis::scheduler
