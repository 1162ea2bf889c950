#ifndef TRELLIS_SCHEDULER_GRPO_LOOP_H_
#define TRELLIS_SCHEDULER_GRPO_LOOP_H_

// The GRPO training loop, driven against the role interfaces only:
//
//   SFT warm-up -> reference taken -> eval (before) ->
//   { rollout -> verify -> reference log-probs -> advantages -> update ->
//     weight sync } x steps -> eval (after)
//
// With algorithm "online_dpo" each step is OnlineDpoStep instead
// (scheduler/online_dpo.cc): rollout -> verify -> a pair per prompt ->
// reference log-probs -> preference update -> weight sync.
//
// Embedded mode binds in-process roles; distributed mode binds gRPC clients
// with the same contracts, and the loop does not change.

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "actor/rollout_worker.h"
#include "data/dataset.h"
#include "learner/advantages.h"
#include "learner/learner_worker.h"
#include "ledger/ledger.h"
#include "model/tokenizer.h"
#include "reference/reference_worker.h"
#include "scheduler/checkpoint.h"
#include "trellis/v1/job.pb.h"
#include "verifier/verifier.h"

namespace trellis::scheduler {

struct Roles {
  actor::RolloutWorker* actor = nullptr;
  learner::LearnerWorker* learner = nullptr;
  // May be null when grpo.kl_coef is 0.
  reference::ReferenceWorker* reference = nullptr;
  verifier::VerifierClient* verifier = nullptr;
};

class GrpoLoop {
 public:
  // Everything passed in must outlive the loop. Progress lines go to
  // `progress` (may be null). Artifacts (the reference weights) go to
  // `out_dir`.
  GrpoLoop(const v1::JobConfig& job, Roles roles, const model::Tokenizer* tokenizer,
           data::Split data, ledger::Ledger* ledger, std::string out_dir,
           std::ostream* progress);

  // Continue a run from a checkpoint instead of starting it: Run() then
  // skips the warm-up and the "before" evaluation, loads the reference from
  // OUT/reference.safetensors, and runs GRPO steps from state.next_step
  // with the prompt streams at the saved positions. The caller restores the
  // learner (LearnerWorker::RestoreCheckpoint), the global RNG and the
  // ledger. Call before Run().
  void ResumeFrom(const LoopState& state);

  // Checked before every GRPO step: when it returns true the run stops
  // with Cancelled (a job cancelled through the scheduler).
  void SetStopRequested(std::function<bool()> stop_requested) {
    stop_requested_ = std::move(stop_requested);
  }

  // Runs the whole job; the first failure stops it and is returned with
  // the stage and step where it happened. With runtime.checkpoint_every > 0
  // it writes a checkpoint (scheduler/checkpoint.h) after every that many
  // steps.
  [[nodiscard]] absl::Status Run();

  // The per-step metrics of the steps this loop ran (after a resume: only
  // the resumed steps; the ledger carries the whole run's totals).
  const std::vector<ledger::StepMetrics>& history() const { return history_; }
  const ledger::EvalMetrics& eval_before() const { return eval_before_; }
  const ledger::EvalMetrics& eval_after() const { return eval_after_; }

 private:
  absl::Status WarmUp();
  absl::Status TakeReference();
  absl::StatusOr<ledger::EvalMetrics> Evaluate(const std::string& label);
  absl::Status Step(int64_t step);
  // An online DPO step (scheduler/online_dpo.cc).
  absl::Status OnlineDpoStep(int64_t step);
  // Begins `step` in the ledger; its counts with the step, prompts, group
  // size and the policy version that samples it.
  ledger::StepCounts OpenStep(int64_t step, int64_t prompts, int64_t group);
  // Seconds the steps after `step` (of `steps`) take at the mean so far.
  double Eta(int64_t step, int64_t steps) const;
  // A step's samples: the groups of every rollout round, in order.
  struct StepSamples {
    std::vector<const data::Example*> examples;  // one per group
    v1::GenerateResponse rollout;                // samples; generated_tokens summed
    v1::VerifyResponse verdicts;                 // results in sample order; each part's stats
    double verify_overlap_seconds = 0;           // verification while the rollout ran
  };
  // One rollout round: draws `prompts` prompts, samples and verifies their
  // groups, and appends them to *out. Adds the round's rollout and verify
  // seconds to *seconds (may be null).
  absl::Status SampleRound(int64_t step, int round, int64_t prompts, StepSamples* out,
                           double* seconds);
  struct RewardSummary {
    double mean_reward = 0;
    double accuracy = 0;
  };
  // DAPO dynamic sampling: more rounds until prompts_per_step groups have
  // rewards that differ or grpo.dapo.max_sampling_rounds have run; then
  // leaves only the first prompts_per_step such groups in *drawn. Counts the
  // rounds, prompts, seconds and left-out samples in `counts`; returns the
  // reward and accuracy of every sample drawn.
  absl::StatusOr<RewardSummary> SampleUsefulGroups(int64_t step, StepSamples* drawn,
                                                   ledger::StepCounts& counts);
  // Per-sample advantages of a step's rewards (grpo.advantage_estimator,
  // without the `dropped` samples when any_dropped); PPO: zeros, since the
  // learner computes its own.
  absl::StatusOr<learner::GroupAdvantages> SampleAdvantages(const std::vector<float>& rewards,
                                                            std::vector<bool>& dropped,
                                                            bool any_dropped) const;
  // Checkpoint after `steps_done` GRPO steps.
  absl::Status CheckpointAfter(int64_t steps_done);
  // Learner publishes its current version, unless the actor has it already;
  // the actor takes it.
  absl::Status SyncWeights();
  absl::StatusOr<v1::Prompt> MakePrompt(const data::Example& example) const;

  const v1::JobConfig job_;
  // algorithm "ppo", and PPO's rewards coming from the reward model.
  const bool ppo_;
  const bool reward_model_;
  const Roles roles_;
  const model::Tokenizer* tokenizer_;
  const data::Split data_;
  // SFT examples (the first sft.num_examples of the split) and RL prompts
  // (the whole split), each its own reproducible stream.
  data::PromptStream sft_stream_;
  data::PromptStream train_stream_;
  ledger::Ledger* ledger_;
  const std::string out_dir_;
  std::ostream* progress_;
  std::vector<ledger::StepMetrics> history_;
  ledger::EvalMetrics eval_before_;
  ledger::EvalMetrics eval_after_;
  // Newest version the actor holds; -1 before the first sync.
  int64_t published_version_ = -1;
  std::optional<LoopState> resume_;
  std::function<bool()> stop_requested_;
};

}  // namespace trellis::scheduler

#endif  // TRELLIS_SCHEDULER_GRPO_LOOP_H_
