#ifndef TRELLIS_LOOP_BATCH_H_
#define TRELLIS_LOOP_BATCH_H_

// A policy-gradient step's batch assembly, as a pure function: the step's
// samples, their verdicts and rewards, the drop policy and the advantages
// in; the TrainBatch the learner trains on and the step's counters out.

#include <cstdint>
#include <vector>

#include "learner/advantages.h"
#include "ledger/ledger.h"
#include "trellis/v1/job.pb.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::loop {

// verifier.timeout_policy "drop": TIMEOUT samples leave training.
bool DropsTimeouts(const v1::JobConfig& job);

// Per sample: left out of training by the drop policy (a TIMEOUT verdict
// when `drop_timeouts`).
std::vector<bool> DroppedSamples(const v1::VerifyResponse& verdicts, bool drop_timeouts);

struct BatchInput {
  // The step's samples, in groups of `group` consecutive responses to one
  // prompt, and one verdict per sample in the same order.
  const google::protobuf::RepeatedPtrField<v1::Sample>* samples = nullptr;
  const v1::VerifyResponse* verdicts = nullptr;
  int64_t group = 1;
  // The reward each sample trains on (the verifier's, or a reward model's).
  std::vector<float> rewards;
  // Samples left out (DroppedSamples, widened by the advantage estimator to
  // whole groups left with too few samples).
  std::vector<bool> dropped;
  // The estimator's advantages; null when the learner computes its own from
  // the rewards (PPO's critic and GAE): then every non-empty response
  // carries gradient and no sample gets an advantage.
  const learner::GroupAdvantages* advantages = nullptr;
  // Per-sample reference log-probs (the KL term); null without one.
  const v1::LogProbResponse* reference = nullptr;
  // Per-sample distill teacher log-probs (TrainSample.teacher_logprobs);
  // null without a teacher. With a teacher every non-empty response
  // carries gradient, whatever its advantage.
  const v1::LogProbResponse* teacher = nullptr;
  // DAPO: a response cut off at the token budget trains no loss.
  bool overlong_filtering = false;
  // The learner's policy version the batch trains at (each sample's
  // staleness is this minus the version that generated it).
  int64_t learner_version = 0;
};

// Counts a sample whose group carries no gradient (all rewards equal) or
// whose verifier failed: samples_error or samples_timeout when the verifier
// failed on it (a dead verifier's equal rewards are what left the group
// without a gradient), else samples_zero_variance.
void CountNoGradient(v1::Verdict verdict, ledger::StepCounts* counts);

// Adds `sample`, trained at the learner's `learner_version`, to the
// staleness histogram (counts->staleness[learner_version - its version])
// and each of its tokens to counts->token_staleness (by the token's
// version, Sample.token_versions).
void CountStaleness(int64_t learner_version, const v1::Sample& sample,
                    ledger::StepCounts* counts);

// The batch: one TrainSample per kept, non-empty sample, in order, with its
// tokens, sampling log-probs, reward, reference and teacher log-probs (when
// given) and advantage (when given). Into *counts: mean_reward and accuracy over the
// kept samples, and added to its counters: samples_dropped, each kept
// sample's first loss (error, timeout, zero_variance, truncated,
// unparseable), samples_overlong and samples_effective; the batch's
// samples in the staleness histogram, and the id of each prompt with a
// sample in the batch appended to prompt_ids.
// REQUIRES: rewards, dropped and the verdicts' results one per sample.
v1::TrainBatch AssembleBatch(const BatchInput& in, ledger::StepCounts* counts);

}  // namespace trellis::loop

#endif  // TRELLIS_LOOP_BATCH_H_
