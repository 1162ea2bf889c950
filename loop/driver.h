#ifndef TRELLIS_LOOP_DRIVER_H_
#define TRELLIS_LOOP_DRIVER_H_

// The run every recipe shares, driven against the role interfaces only:
//
//   fresh:   recipe Prepare -> Evaluate("before")
//   resumed: prompt streams at the saved positions, weights synced, the
//            reference loaded from OUT/reference.safetensors
//   { cancelled? -> recipe Step -> [weight sync] -> step closed in the
//     ledger -> progress -> [Evaluate("step_N")] -> [checkpoint] } x steps
//   -> Evaluate("after")
//
// With job.async enabled the recipe's sampling runs ahead on the rollout
// pipeline's thread (loop/rollout_pipeline.h): after each step the learner
// publishes its weights and the actors load them before their next
// rollout, never during one.
//
// and the pieces a rolling-out recipe builds its step from: the SFT
// warm-up and the frozen reference (PrepareRollouts), a rollout round with
// streaming verification (SampleRound), the greedy held-out evaluation
// (EvaluateRollouts) and weight sync.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "data/dataset.h"
#include "ledger/ledger.h"
#include "loop/episode_runner.h"
#include "loop/loop_state.h"
#include "loop/metered_roles.h"
#include "loop/partial_rollout.h"
#include "loop/prompt_format.h"
#include "loop/recipe.h"
#include "loop/roles.h"
#include "loop/rollout_pipeline.h"
#include "loop/step_samples.h"
#include "trellis/v1/job.pb.h"

namespace trellis::loop {

class Driver {
 public:
  // Writes checkpoint `state` (the run's checkpoint format); `state` lists
  // what the loop carries, the callee adds the learner's files.
  using CheckpointWriter = std::function<absl::Status(const LoopState& state)>;

  // Everything passed in must outlive the driver. Progress lines go to
  // `progress` (may be null), artifacts (the reference weights) to
  // `out_dir`. The recipe is job.algorithm's in `registry` (null: the
  // built-ins).
  Driver(const v1::JobConfig& job, Roles roles, const PromptFormat* format, data::Split data,
         ledger::Ledger* ledger, std::string out_dir, std::ostream* progress,
         const RecipeRegistry* registry = nullptr);
  ~Driver();

  // Continue a run from a checkpoint instead of starting it (call before
  // Run). The caller restores the learner, the global RNG and the ledger.
  void ResumeFrom(const LoopState& state) { resume_ = state; }
  // Checked before every step: true stops the run with Cancelled.
  void SetStopRequested(std::function<bool()> stop) { stop_requested_ = std::move(stop); }
  // With runtime.checkpoint_every > 0, called after every that many steps.
  void SetCheckpointWriter(CheckpointWriter writer) { write_checkpoint_ = std::move(writer); }

  // Runs the whole job; the first failure stops it and is returned with
  // the stage and step where it happened. At its end, failed or not, one
  // stderr line counts the rewards the reward rule clipped in training and
  // evaluation (loop/reward_rule.h), when there were any.
  [[nodiscard]] absl::Status Run();

  // The per-step metrics of the steps this run took (after a resume: only
  // the resumed steps; the ledger carries the whole run's totals).
  const std::vector<ledger::StepMetrics>& history() const { return history_; }
  const ledger::EvalMetrics& eval_before() const { return eval_before_; }
  const ledger::EvalMetrics& eval_after() const { return eval_after_; }
  // The recipe's headline (REQUIRES: Run succeeded).
  std::string Headline() const;

  // ---- For recipes.
  const v1::JobConfig& job() const { return job_; }
  const Roles& roles() const { return roles_; }
  const PromptFormat& format() const { return *format_; }
  const text::Tokenizer& tokenizer() const { return format_->tokenizer(); }
  const data::Split& data() const { return data_; }
  ledger::Ledger& ledger() const { return *ledger_; }
  const std::string& out_dir() const { return out_dir_; }
  // Writes `line` to the progress stream, if any, and flushes it.
  void Print(const std::string& line) const;
  // The SFT examples (the first sft.num_examples of the split) as one
  // reproducible stream.
  data::PromptStream& sft_stream() { return sft_stream_; }
  // Seconds the steps after `step` (of `steps`) take at the mean so far.
  double Eta(int64_t step, int64_t steps) const;

  // A rolling-out recipe's Prepare: weights synced, the SFT warm-up
  // (job.sft), weights synced again, the reference taken when there is one
  // (not a distill teacher, which loads its own weights).
  [[nodiscard]] absl::Status PrepareRollouts();
  // Greedy decoding of the held-out prompts, scored by the verifier. An
  // item whose verification failed (ERROR or TIMEOUT) is verified again, up
  // to eval.verify_retries times, after the breaker's pause when the
  // breaker refused it; one that still fails is left out of the accuracy
  // (EvalMetrics::unscored), never scored wrong. Every item's prompt,
  // response and verdict are written to OUT/eval/<label>.jsonl
  // (loop/eval_answers.h).
  [[nodiscard]] absl::StatusOr<ledger::EvalMetrics> EvaluateRollouts(const std::string& label);
  // One rollout round of `step`: draws `prompts` prompts from the RL
  // stream, samples `group` responses to each and verifies them while they
  // are generated, and appends them to *out. Adds the round's rollout and
  // verify seconds to *seconds (may be null).
  [[nodiscard]] absl::Status SampleRound(int64_t step, int round, int64_t prompts, int64_t group,
                                         StepSamples* out, double* seconds);
  // SampleRound in two: the rollout, its verification left running; then
  // the verdicts and the reward rule, appended to *out.
  [[nodiscard]] absl::StatusOr<std::unique_ptr<PendingRound>> StartRound(int64_t step, int round,
                                                                         int64_t prompts,
                                                                         int64_t group);
  // A round's request without its prompts: the job's sampling, `group`
  // responses per prompt, the round's seed.
  v1::GenerateRequest RoundRequest(int64_t step, int round, int64_t group) const;
  [[nodiscard]] absl::Status FinishRound(PendingRound& round, StepSamples* out, double* seconds);
  // A step's first rollout round (SampleRound, round 0), counted in
  // `counts`: prompts, responses per prompt, samples, generated tokens and
  // the verification that overlapped the rollout.
  [[nodiscard]] absl::StatusOr<StepSamples> SampleStep(int64_t step, int64_t prompts, int64_t group,
                                                       ledger::StepCounts& counts);
  // SampleStep without waiting for the verification: the round pending in
  // the result, for FinishSampling (which the step calls when it takes it).
  [[nodiscard]] absl::StatusOr<SampledStep> StartSampleStep(int64_t step, int64_t prompts,
                                                            int64_t group);
  [[nodiscard]] absl::Status FinishSampling(SampledStep& sampled);
  // `step`'s sampling by `sample`: run now, or with job.async enabled taken
  // from the rollout pipeline, which the first call starts with `sample`
  // (then run on its thread, ahead of the learner, for every later step).
  using SampleFn = std::function<absl::StatusOr<SampledStep>(int64_t step)>;
  [[nodiscard]] absl::StatusOr<SampledStep> TakeSamples(int64_t step, const SampleFn& sample);
  // Multi-turn rollouts (job.environment.name set): `request`'s episodes
  // in roles().environment (loop/episode_runner.h); FailedPrecondition
  // when the run bound none.
  [[nodiscard]] absl::StatusOr<EpisodeResults> RunEpisodes(
      const v1::GenerateRequest& request, const std::vector<const data::Example*>& examples);
  // Writes the learner's weights to OUT/reference.safetensors and loads
  // them into the reference.
  [[nodiscard]] absl::Status TakeReference();

 private:
  // StartRound's first round under partial rollout (loop/partial_rollout.h):
  // the groups carried from the last round and new draws, stopped once the
  // step's batch has finished.
  absl::StatusOr<std::unique_ptr<PendingRound>> StartPartialRound(int64_t step, int64_t group);
  // The RL stream's mark now (its position, partial rollout's groups in
  // flight).
  StreamMark Mark();
  absl::Status WarmUp();
  // Publish (the learner's newest version, on the driver's thread) and
  // LoadWeights (into the actors, between rollouts); SyncWeights is both.
  absl::Status SyncWeights();
  absl::Status Publish();
  absl::Status LoadWeights();
  // Closes `step`'s prompts in the account (counts.prompts drawn, the
  // trained prompt_ids, counts.prompt_account.dropped by reason); Internal
  // when drawn != trained + dropped + in flight.
  absl::Status Account(ledger::StepCounts& counts);
  absl::Status Resume();
  // The FailedPrecondition of a job naming an environment the run did not
  // bind.
  absl::Status NoEnvironment() const;
  absl::Status RunStep(int64_t step);
  // Run's steps and evaluations.
  absl::Status RunRecipe();
  // The stderr line of the rewards clipped in this run, if any.
  void AnnounceClipping() const;
  absl::Status CheckpointAfter(int64_t steps_done);
  // EvaluateRollouts' verdicts on held-out items [begin, end) (`request`
  // holds their prompts): generated and verified, or with an environment
  // run as episodes and scored by it. Each item's response is appended to
  // *responses.
  absl::StatusOr<v1::VerifyResponse> EvaluateBatch(const v1::GenerateRequest& request,
                                                   int64_t begin, int64_t end,
                                                   const std::string& label,
                                                   ledger::EvalMetrics* metrics,
                                                   std::vector<std::string>* responses);
  // EvaluateRollouts' verification of one batch, with its retries (counted
  // in *retried); every request's stats go to the ledger.
  absl::StatusOr<v1::VerifyResponse> VerifyHeldOut(const v1::VerifyRequest& request,
                                                   const std::string& label, int64_t* retried);

  const v1::JobConfig job_;
  // The learner and the reference as the loop calls them: recording the
  // arithmetic each call reports (loop/metered_roles.h). Set by roles_'s
  // initializer.
  std::unique_ptr<MeteredLearner> metered_learner_;
  std::unique_ptr<MeteredReference> metered_reference_;
  const Roles roles_;
  const PromptFormat* format_;
  const data::Split data_;
  const RecipeRegistry& registry_;
  // SFT examples and RL prompts, each its own reproducible stream.
  data::PromptStream sft_stream_;
  data::PromptStream train_stream_;
  ledger::Ledger* ledger_;
  const std::string out_dir_;
  std::ostream* progress_;
  const RecipeSpec* spec_ = nullptr;
  std::unique_ptr<Recipe> recipe_;
  std::vector<ledger::StepMetrics> history_;
  ledger::EvalMetrics eval_before_;
  ledger::EvalMetrics eval_after_;
  // Rewards the reward rule clipped in evaluations (training's are in
  // history_'s counts).
  int64_t eval_rewards_clipped_ = 0;
  // Held by whoever uses the actors: the pipeline's rollouts, evaluations.
  absl::Mutex actor_mu_;
  // The weight handoff: the newest version published and the version the
  // actors hold (-1 before the first), and the publish's stats.
  absl::Mutex handoff_mu_;
  int64_t published_version_ ABSL_GUARDED_BY(handoff_mu_) = -1;
  int64_t actor_version_ ABSL_GUARDED_BY(handoff_mu_) = -1;
  v1::WeightSyncStats published_ ABSL_GUARDED_BY(handoff_mu_);
  // The RL prompt stream's account (SampleRound draws on the pipeline's
  // thread, Account closes steps on the driver's).
  absl::Mutex account_mu_;
  ledger::PromptAccount account_ ABSL_GUARDED_BY(account_mu_);
  // Partial rollout's groups between rounds (null without it).
  std::unique_ptr<PartialRollouts> partial_ ABSL_GUARDED_BY(account_mu_);
  // The pipeline's first step and the learner's version then: step t
  // trains at about first_version_ + t - first_step_ (partial rollout's
  // staleness bound). Set before the pipeline's thread starts.
  int64_t first_step_ = 0;
  int64_t first_version_ = 0;
  std::optional<LoopState> resume_;
  std::function<bool()> stop_requested_;
  CheckpointWriter write_checkpoint_;
  // Last: ended before the members its thread uses.
  std::unique_ptr<RolloutPipeline> pipeline_;
};

}  // namespace trellis::loop

#endif  // TRELLIS_LOOP_DRIVER_H_
