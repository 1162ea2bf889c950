#ifndef TRELLIS_LEDGER_STEP_RECORDS_H_
#define TRELLIS_LEDGER_STEP_RECORDS_H_

// A step's record (ledger/ledger.h Ledger::EndStep): what the scheduler
// counted in the step, and the metrics the ledger derives from it.

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ledger/kinds.h"

namespace trellis::ledger {

// What the scheduler counted in one step; the ledger derives the rest.
// Exact accounting of a run's RL prompt stream, over the run so far: every
// prompt drawn is trained, dropped with a reason, or still in flight (drawn
// by the asynchronous pipeline for a step not trained yet).
struct PromptAccount {
  int64_t drawn = 0;
  // In a step's batch (at least one of its samples trained).
  int64_t trained = 0;
  // Left out of every batch, by reason: "dynamic_sampling" (DAPO left its
  // group out), "no_sample_kept" (the drop policy, overlong filtering or
  // empty responses left none of its samples), "no_pair" (online_dpo: its
  // rewards were all equal).
  std::map<std::string, int64_t> dropped;
  int64_t in_flight = 0;

  int64_t dropped_total() const;
  // drawn == trained + dropped_total() + in_flight.
  bool Reconciles() const;
};

struct StepCounts {
  int64_t step = 0;
  int64_t policy_version = 0;
  int64_t prompts = 0;
  int64_t responses_per_prompt = 0;
  int64_t samples_generated = 0;
  // Samples whose advantage is non-zero: they carry gradient.
  int64_t samples_effective = 0;
  // Losses, each counted once (a sample in a zero-variance group is counted
  // there even if it was also truncated).
  int64_t samples_zero_variance = 0;
  int64_t samples_truncated = 0;
  int64_t samples_unparseable = 0;
  int64_t samples_error = 0;
  // TIMEOUT verdicts that trained with verifier.timeout_reward, and samples
  // left out by verifier.timeout_policy "drop" (with their groups when too
  // few samples were left).
  int64_t samples_timeout = 0;
  int64_t samples_dropped = 0;
  // Finite rewards beyond verifier.max_abs_reward, clipped to it (a
  // non-finite reward is an ERROR verdict, in samples_error).
  int64_t samples_reward_clipped = 0;
  int64_t generated_tokens = 0;
  int64_t trained_tokens = 0;
  double mean_reward = 0;
  // Fraction of samples the verifier judged correct.
  double accuracy = 0;
  double loss = 0;
  double kl = 0;
  double clip_fraction = 0;
  double grad_norm = 0;
  // Updates that took no optimizer step because their loss or gradient
  // norm was not finite (TrainStats.skipped_nonfinite; the run stops after
  // runtime.max_nonfinite_skips in a row).
  int64_t steps_skipped_nonfinite = 0;
  // PPO: the critic's value loss and the fraction of its values clipped.
  double value_loss = 0;
  double value_clip_fraction = 0;
  // DAPO dynamic sampling (grpo.dapo.dynamic_sampling): rollout rounds
  // after the first, the prompts they drew (also in `prompts`), and their
  // seconds (rollout, verify); samples of groups with different rewards
  // beyond prompts_per_step, left out.
  int64_t sampling_rounds_extra = 0;
  int64_t prompts_extra = 0;
  double sampling_seconds_extra = 0;
  int64_t samples_surplus = 0;
  // DAPO overlong filtering (grpo.dapo.overlong_filtering): truncated
  // samples left out of the loss (each also counted above as truncated or
  // zero-variance).
  int64_t samples_overlong = 0;
  // Seconds of verification that ran while the rollout was still going
  // (streamed parts: scheduler/streaming_verify.h).
  double verify_overlap_seconds = 0;
  // The rollout's decode batch bound (GenerateResponse.decode_token_budget):
  // an actor pool's sum over its actors, each chosen by its controller
  // under sampling.concurrency auto; 0 when an actor decoded every row at
  // once (no bound).
  int64_t rollout_concurrency = 0;
  // The actors that answered the step's rollout: an actor pool's members
  // that were given a shard (actors join and leave between steps); 1 for a
  // single actor; 0 for a step that rolled nothing out.
  int64_t rollout_actors = 0;
  // Preference steps (dpo, online_dpo): the batch's mean implicit reward
  // margin and the fraction of its pairs ranked right (TrainStats).
  double reward_margin = 0;
  double preference_accuracy = 0;
  // Memory strategies (job.memory), from the learner's TrainStats: seconds
  // recomputing checkpointed blocks; ZeRO-1's gradient and parameter
  // traffic of the learner ranks, bytes and seconds.
  double recompute_seconds = 0;
  int64_t communication_bytes = 0;
  double communication_seconds = 0;
  // The asynchronous pipeline (job.async): staleness[k] samples trained k
  // policy versions after the version that generated them (the synchronous
  // loop: all at 0); decoupled PPO's mean |behaviour - proximal| log-prob
  // per token and fraction of importance weights truncated (TrainStats).
  std::vector<int64_t> staleness;
  double logprob_gap = 0;
  double importance_weight_truncated = 0;
  // Partial rollout (job.async.partial_rollout): token_staleness[k]
  // trained tokens produced k policy versions before the update (a
  // continued response's tokens are of several versions); groups this
  // step's rollout carried to the next one (unfinished, or finished beyond
  // the batch), groups it started afresh (REQUEUE, or a token too stale to
  // go on) and the tokens they threw away.
  std::vector<int64_t> token_staleness;
  int64_t rollout_groups_carried = 0;
  int64_t rollout_groups_restarted = 0;
  int64_t rollout_tokens_discarded = 0;
  // Mixture-of-experts policies (TrainStats): the load-balancing loss;
  // with grpo.routing_replay the share of positions the learner's own
  // router would have sent to other experts in some layer, the routing records'
  // bytes, and the mean |behaviour - learner| log-prob per trained token
  // with the replayed and with the learner's own routing.
  double router_aux_loss = 0;
  double routing_mismatch = 0;
  int64_t routing_record_bytes = 0;
  double logprob_gap_replayed = 0;
  double logprob_gap_own_routing = 0;
  // Distill: the mean over trained tokens of the divergence estimate to
  // the teacher before the update (TrainStats.teacher_divergence).
  double teacher_divergence = 0;
  // The ids of the prompts the step trained (PromptAccount::trained), in
  // order, and the RL prompt stream's account at the step's end.
  std::vector<uint64_t> prompt_ids;
  PromptAccount prompt_account;
};

// The derived metrics of one step, as written to ledger.jsonl.
struct StepMetrics {
  StepCounts counts;
  std::array<double, kNumStages> stage_seconds{};
  double step_seconds = 0;
  double rollout_update_ratio = 0;
  double verifier_wait_seconds = 0;
  double effective_sample_rate = 0;
  double generated_tokens_per_second = 0;
  double trained_tokens_per_second = 0;
  double handoff_seconds = 0;
  int64_t handoff_bytes = 0;
  // Moves between device and host in this step (RecordMove): their count,
  // bytes and seconds, both directions summed.
  int64_t moves = 0;
  int64_t move_bytes = 0;
  double move_seconds = 0;
  // Highest live CPU bytes during the step (memory tracker).
  int64_t peak_bytes = 0;
  // The step's timeline: each role's busy seconds (the union of its spans
  // within the step), and the share of the roles' time none of their spans
  // covered (1 - sum busy / (roles x step_seconds)).
  std::map<std::string, double> role_busy_seconds;
  double bubble_fraction = 0;
  // Useful arithmetic per stage this step (RecordFlops), and the run's
  // measured matrix-product peak (RecordMachine; 0 before it).
  std::array<double, kNumStages> stage_flops{};
  double matmul_peak_flops_per_second = 0;
};

}  // namespace trellis::ledger

#endif  // TRELLIS_LEDGER_STEP_RECORDS_H_
