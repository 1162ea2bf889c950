#ifndef TRELLIS_LOOP_EPISODE_RUNNER_H_
#define TRELLIS_LOOP_EPISODE_RUNNER_H_

// Multi-turn rollouts (docs/multi-turn.md): a step's prompts times
// responses_per_prompt episodes, each opened in the job's environment, then
// run in rounds. A round asks the actor for every live episode's next turn
// (its whole sequence so far as the prompt, the turn's stop as a stop
// sequence), streaming: each turn that ended on the stop is sent to the
// environment's Step as soon as the actor hands it over, while the actor
// generates the others (environment.workers Steps at once), and the
// observation's tokens are appended; the next round starts once every
// Step of this one has returned. A sample's
// response is every token after the prompt: the policy's turns exactly as
// generated (trained) and the observations as tokenized (not trained).

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "actor/rollout_worker.h"
#include "data/dataset.h"
#include "environment/environment.h"
#include "loop/prompt_format.h"
#include "trellis/v1/environment.pb.h"
#include "trellis/v1/job.pb.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::loop {

struct EpisodeResults {
  // Prompt-major, responses_per_prompt per prompt, in request order; each
  // sample's turns, episode_end and trained mask set.
  v1::GenerateResponse rollout;
  // One per sample: the sum of its steps' rewards, or
  // environment.failure_reward when an environment failure ended it.
  std::vector<float> rewards;
  v1::EnvironmentStats stats;
};

class EpisodeRunner {
 public:
  using Clock = std::function<absl::Time()>;

  // `job`'s environment and sampling; `format` the one the prompts were
  // made with: its tokenizer, and its chat template for chat examples
  // (loop/turn_format.h). `now` times the episode deadline and the
  // environment's waits. The pointers outlive the runner.
  EpisodeRunner(const v1::JobConfig& job, actor::RolloutWorker* actor,
                environment::Environment* environment, const PromptFormat* format,
                Clock now = &absl::Now);

  // Runs request.responses_per_prompt episodes for each of request.prompts
  // (`examples[i]` is prompt i's dataset item, for Open's metadata), sampled
  // with request.sampling and request.seed. An environment failure ends its
  // episode only; an actor failure or a stop sequence that does not
  // tokenize fails the whole call (every opened episode is still closed).
  [[nodiscard]] absl::StatusOr<EpisodeResults> Run(
      const v1::GenerateRequest& request, const std::vector<const data::Example*>& examples);

 private:
  const v1::JobConfig& job_;
  actor::RolloutWorker* actor_;
  environment::Environment* environment_;
  const PromptFormat* format_;
  Clock now_;
};

// The episodes' rewards as the verdicts a verifier would give: reward as
// given; CORRECT when positive, WRONG otherwise, ERROR (failure
// CALL_FAILED) for an episode an environment failure ended.
v1::VerifyResponse EpisodeVerdicts(const EpisodeResults& results);

// Adds `from`'s counts to *into (max_turns the larger; environment set).
void AddEnvironmentStats(const v1::EnvironmentStats& from, v1::EnvironmentStats* into);

}  // namespace trellis::loop

#endif  // TRELLIS_LOOP_EPISODE_RUNNER_H_
