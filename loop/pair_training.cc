#include "loop/pair_training.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "config/worker_id.h"
#include "loop/fixed_data.h"
#include "loop/loop_util.h"

namespace trellis::loop {
namespace {

using ledger::Stage;

// Salt of the seed the arithmetic pairs' wrong answers are drawn from.
constexpr uint64_t kPairSalt = 1ULL << 41;

}  // namespace

absl::Status PairRecipe::Prepare() {
  const v1::JobConfig& job = driver_.job();
  const text::Tokenizer& tokenizer = driver_.tokenizer();
  auto span = driver_.ledger().Begin(Stage::kLoad, config::WorkerId(v1::SCHEDULER).ToString());
  const v1::DataConfig& d = job.data();
  data::PreferenceSplit split;
  if (d.preference_train_path().empty()) {
    const uint64_t seed = MixSeed(job.runtime().seed(), kPairSalt);
    split.train = data::ArithmeticPreferences(driver_.data().train, seed);
    split.eval = data::ArithmeticPreferences(driver_.data().eval, seed + 1);
  } else {
    for (auto [path, out] : {std::pair{&d.preference_train_path(), &split.train},
                             std::pair{&d.preference_eval_path(), &split.eval}}) {
      absl::StatusOr<std::vector<data::PreferencePair>> pairs = data::ReadPreferenceJsonl(*path);
      if (!pairs.ok()) return pairs.status();
      *out = *std::move(pairs);
    }
  }
  split.eval = Head(split.eval, settings_.eval_pairs);
  for (auto [from, to] :
       {std::pair{&split.train, &train_pairs_}, std::pair{&split.eval, &eval_pairs_}}) {
    for (const data::PreferencePair& pair : *from) {
      data::Example ex;
      ex.id = pair.id;
      ex.prompt = pair.prompt;
      absl::StatusOr<v1::Prompt> prompt = MakePrompt(tokenizer, ex);
      if (!prompt.ok()) return prompt.status();
      absl::StatusOr<std::vector<int32_t>> chosen =
          ResponseTokens(tokenizer, pair.chosen, absl::StrCat("chosen of pair ", pair.id));
      if (!chosen.ok()) return chosen.status();
      absl::StatusOr<std::vector<int32_t>> rejected =
          ResponseTokens(tokenizer, pair.rejected, absl::StrCat("rejected of pair ", pair.id));
      if (!rejected.ok()) return rejected.status();
      v1::PreferencePair& p = to->emplace_back();
      *p.mutable_prompt_tokens() = prompt->token_ids();
      p.mutable_chosen_tokens()->Add(chosen->begin(), chosen->end());
      p.mutable_rejected_tokens()->Add(rejected->begin(), rejected->end());
    }
  }
  if (train_pairs_.empty() || eval_pairs_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the ", job.algorithm(), " job needs train and held-out preference pairs; found ",
        train_pairs_.size(), " train and ", eval_pairs_.size(), " held-out"));
  }
  std::vector<data::Example> ids(train_pairs_.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i].id = i;
  stream_ = std::make_unique<data::PromptStream>(std::move(ids), job.runtime().seed());
  return absl::OkStatus();
}

absl::StatusOr<ledger::EvalMetrics> PairRecipe::Evaluate(const std::string& label) {
  std::vector<v1::PreferencePair*> pairs;
  for (v1::PreferencePair& p : eval_pairs_) pairs.push_back(&p);
  if (absl::Status s = BeforeUse(pairs, /*eval=*/true); !s.ok()) return At(s, "eval " + label);
  const v1::JobConfig& job = driver_.job();
  auto span = driver_.ledger().Begin(Stage::kEval, config::WorkerId(v1::SCHEDULER).ToString());
  EvalSums sums;
  const size_t n = eval_pairs_.size();
  for (size_t begin = 0; begin < n; begin += job.eval().batch_size()) {
    const size_t end = std::min(n, begin + job.eval().batch_size());
    v1::PreferenceBatch batch;
    for (size_t i = begin; i < end; ++i) *batch.add_pairs() = eval_pairs_[i];
    absl::StatusOr<v1::TrainStats> stats = driver_.roles().learner->EvalPreference(batch);
    if (!stats.ok()) return At(stats.status(), "eval " + label);
    sums.Add(*stats, end - begin, end - begin, stats->preference_accuracy());
  }
  ledger::EvalMetrics metrics;
  metrics.prompts = sums.rows;
  metrics.accuracy = sums.accuracy / sums.rows;
  metrics.loss = sums.loss / sums.weight;
  metrics.reward_margin = sums.margin / sums.rows;
  driver_.ledger().RecordEval(label, metrics);
  driver_.Print(absl::StrFormat(
      "eval %-8s  preference accuracy %.3f  reward margin %.4f  loss %.4f  (%d held-out "
      "pairs)\n",
      label, metrics.accuracy, *metrics.reward_margin, *metrics.loss, metrics.prompts));
  return metrics;
}

absl::Status PairRecipe::Step(int64_t step, ledger::StepCounts& counts) {
  counts.prompts = settings_.batch_size;
  std::vector<size_t> drawn;
  for (int i = 0; i < settings_.batch_size; ++i) drawn.push_back(stream_->Next().id);
  std::vector<v1::PreferencePair*> pairs;
  for (size_t i : drawn) pairs.push_back(&train_pairs_[i]);
  if (absl::Status s = BeforeUse(pairs, /*eval=*/false); !s.ok()) return s;
  v1::PreferenceBatch batch;
  for (size_t i : drawn) *batch.add_pairs() = train_pairs_[i];
  absl::StatusOr<v1::TrainStats> stats;
  {
    auto span = driver_.ledger().Begin(Stage::kUpdate, config::WorkerId(v1::LEARNER).ToString());
    stats = driver_.roles().learner->PreferenceStep(batch);
  }
  if (!stats.ok()) return At(stats.status(), "update");
  RecordUpdate(*stats, &counts);
  counts.accuracy = stats->preference_accuracy();
  return absl::OkStatus();
}

std::string PairRecipe::Progress(int64_t step, const ledger::StepCounts& counts,
                                 const ledger::StepMetrics& metrics) const {
  return FixedDataProgress(step, settings_.steps, counts, metrics, /*preference=*/true);
}

std::string PairRecipe::Headline(const ledger::EvalMetrics& before,
                                 const ledger::EvalMetrics& after) const {
  return absl::StrFormat(
      "held-out preference accuracy: before %.3f  after %.3f  (reward margin %.4f -> %.4f, "
      "loss %.4f -> %.4f)\n",
      before.accuracy, after.accuracy, before.reward_margin.value_or(0),
      after.reward_margin.value_or(0), before.loss.value_or(0), after.loss.value_or(0));
}

}  // namespace trellis::loop
