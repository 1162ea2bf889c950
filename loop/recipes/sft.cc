// SFT as a job of its own (algorithm "sft"): supervised steps on the job's
// examples (the driver's SFT stream), the held-out loss and exact match
// before and after. No rollout, no reference.

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "config/worker_id.h"
#include "loop/driver.h"
#include "loop/fixed_data.h"
#include "loop/loop_util.h"
#include "loop/recipes/builtin.h"

namespace trellis::loop {
namespace {

using ledger::Stage;

class Sft final : public Recipe {
 public:
  explicit Sft(Driver& driver) : driver_(driver) {}

  absl::Status Prepare() override {
    const data::Split& data = driver_.data();
    if (data.train.empty() || data.eval.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the sft job needs train and eval examples; found ", data.train.size(),
                       " train and ", data.eval.size(), " eval"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<ledger::EvalMetrics> Evaluate(const std::string& label) override {
    const v1::JobConfig& job = driver_.job();
    auto span = driver_.ledger().Begin(Stage::kEval, config::WorkerId(v1::SCHEDULER).ToString());
    const std::vector<data::Example> eval = Head(driver_.data().eval, job.eval().num_prompts());
    EvalSums sums;
    for (size_t begin = 0; begin < eval.size(); begin += job.eval().batch_size()) {
      const size_t end = std::min(eval.size(), begin + job.eval().batch_size());
      v1::SftBatch batch;
      for (size_t i = begin; i < end; ++i) {
        absl::StatusOr<v1::SftBatch::Pair> pair = driver_.format().MakeSftPair(eval[i]);
        if (!pair.ok()) return At(pair.status(), "eval " + label);
        *batch.add_pairs() = *std::move(pair);
      }
      absl::StatusOr<v1::TrainStats> stats = driver_.roles().learner->EvalSft(batch);
      if (!stats.ok()) return At(stats.status(), "eval " + label);
      sums.Add(*stats, end - begin, stats->trained_tokens(), stats->sequence_accuracy());
    }
    ledger::EvalMetrics metrics;
    metrics.prompts = sums.rows;
    metrics.accuracy = sums.rows > 0 ? sums.accuracy / sums.rows : 0;
    metrics.loss = sums.weight > 0 ? sums.loss / sums.weight : 0;
    driver_.ledger().RecordEval(label, metrics);
    driver_.Print(absl::StrFormat(
        "eval %-6s  loss %.4f  exact-match %.3f  (%d held-out examples, answer tokens)\n", label,
        *metrics.loss, metrics.accuracy, metrics.prompts));
    return metrics;
  }

  absl::Status Step(int64_t step, ledger::StepCounts& counts) override {
    const v1::SftConfig& sft = driver_.job().sft();
    counts.prompts = sft.batch_size();
    v1::SftBatch batch;
    for (int i = 0; i < sft.batch_size(); ++i) {
      absl::StatusOr<v1::SftBatch::Pair> pair =
          driver_.format().MakeSftPair(driver_.sft_stream().Next());
      if (!pair.ok()) return pair.status();
      *batch.add_pairs() = *std::move(pair);
    }
    absl::StatusOr<v1::TrainStats> stats;
    {
      auto span = driver_.ledger().Begin(Stage::kSft, config::WorkerId(v1::LEARNER).ToString());
      stats = driver_.roles().learner->SftStep(batch);
    }
    if (!stats.ok()) return At(stats.status(), "update");
    RecordUpdate(*stats, &counts);
    counts.accuracy = stats->sequence_accuracy();
    return absl::OkStatus();
  }

  std::string Progress(int64_t step, const ledger::StepCounts& counts,
                       const ledger::StepMetrics& metrics) const override {
    return FixedDataProgress(step, driver_.job().sft().steps(), counts, metrics, false);
  }

  std::string Headline(const ledger::EvalMetrics& before,
                       const ledger::EvalMetrics& after) const override {
    return absl::StrFormat(
        "held-out loss (answer tokens): before %.4f  after %.4f  (exact match %.3f -> %.3f)\n",
        before.loss.value_or(0), after.loss.value_or(0), before.accuracy, after.accuracy);
  }

 private:
  Driver& driver_;
};

}  // namespace

absl::Status RegisterSft(RecipeRegistry& registry) {
  RecipeSpec spec;
  spec.rolls_out = false;
  spec.needs_reference = [](const v1::JobConfig&) { return false; };
  spec.steps = [](const v1::JobConfig& job) { return job.sft().steps(); };
  spec.create = [](Driver& driver) -> absl::StatusOr<std::unique_ptr<Recipe>> {
    return std::make_unique<Sft>(driver);
  };
  return registry.Register("sft", std::move(spec));
}

}  // namespace trellis::loop
