#ifndef TRELLIS_SCHEDULER_OFFLINE_LOOP_H_
#define TRELLIS_SCHEDULER_OFFLINE_LOOP_H_

// SFT, DPO and reward-model training as jobs of their own (algorithm
// "sft", "dpo", "reward_model"): updates on a fixed dataset, no rollout,
// driven against the role interfaces only.
//
//   sft: held-out loss (before) -> { SFT step } x sft.steps ->
//        held-out loss (after)
//   dpo: reference taken (the initial policy) ->
//        [reference log-probs of every pair: dpo.reference_logprobs cached] ->
//        held-out preference eval (before) ->
//        { [reference log-probs of the batch: on_the_fly] -> preference step }
//          x dpo.steps -> held-out preference eval (after)
//   reward_model: as dpo without the reference: the learner's scalar-head
//        model ranks each pair (Bradley-Terry loss), reward_model.* settings
//
// Pairs are scored by the reference one pair per request, so a pair's
// reference log-probs do not depend on what else is in a batch: cached and
// on-the-fly runs give the same numbers.

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "ledger/ledger.h"
#include "model/tokenizer.h"
#include "scheduler/grpo_loop.h"
#include "trellis/v1/job.pb.h"

namespace trellis::scheduler {

// Whether `job` runs in an OfflineLoop (sft, dpo, reward_model) rather than
// a GrpoLoop.
bool IsOfflineRecipe(const v1::JobConfig& job);

class OfflineLoop {
 public:
  // As GrpoLoop's: everything passed in must outlive the loop; `data` is
  // the job's examples (sft trains on them; dpo builds arithmetic pairs
  // from them unless data.preference_train_path names pairs).
  OfflineLoop(const v1::JobConfig& job, Roles roles, const model::Tokenizer* tokenizer,
              data::Split data, ledger::Ledger* ledger, std::string out_dir,
              std::ostream* progress);

  // Checked before every step: true stops the run with Cancelled.
  void SetStopRequested(std::function<bool()> stop_requested) {
    stop_requested_ = std::move(stop_requested);
  }

  // Runs the whole job; the first failure is returned with its stage and
  // step.
  [[nodiscard]] absl::Status Run();

  const std::vector<ledger::StepMetrics>& history() const { return history_; }
  const ledger::EvalMetrics& eval_before() const { return eval_before_; }
  const ledger::EvalMetrics& eval_after() const { return eval_after_; }
  // The target metric before and after, one line for the summary table.
  std::string Headline() const;

 private:
  // Training on preference pairs: dpo's or reward_model's settings.
  struct PairTraining {
    int64_t steps = 0;
    int64_t batch_size = 0;
    int64_t eval_every = 0;
    int64_t eval_pairs = 0;
  };
  PairTraining Training() const;

  absl::Status RunSft();
  // dpo and reward_model.
  absl::Status RunPairs();
  absl::StatusOr<ledger::EvalMetrics> EvaluateSft(const std::string& label);
  absl::StatusOr<ledger::EvalMetrics> EvaluatePairs(const std::string& label);
  // Reads or builds the pairs and tokenizes them into train_pairs_ and
  // eval_pairs_ (eval: at most Training().eval_pairs).
  absl::Status LoadPairs();
  // Fills the reference log-prob sums of every pair in `pairs`, one pair
  // per request.
  absl::Status ScorePairs(std::vector<v1::PreferencePair*> pairs);
  // Closes step `step` with `counts`, prints a progress line every tenth of
  // the run.
  void EndStep(int64_t step, int64_t steps, ledger::StepCounts& counts);
  bool Cancelled(int64_t step, absl::Status* status) const;

  const v1::JobConfig job_;
  const bool reward_model_;
  const Roles roles_;
  const model::Tokenizer* tokenizer_;
  const data::Split data_;
  ledger::Ledger* ledger_;
  const std::string out_dir_;
  std::ostream* progress_;
  std::function<bool()> stop_requested_;
  std::vector<v1::PreferencePair> train_pairs_;
  std::vector<v1::PreferencePair> eval_pairs_;
  std::vector<ledger::StepMetrics> history_;
  ledger::EvalMetrics eval_before_;
  ledger::EvalMetrics eval_after_;
};

}  // namespace trellis::scheduler

#endif  // TRELLIS_SCHEDULER_OFFLINE_LOOP_H_
