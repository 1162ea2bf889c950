#ifndef TRELLIS_LOOP_INTERNAL_EPISODES_H_
#define TRELLIS_LOOP_INTERNAL_EPISODES_H_

// The episodes of one EpisodeRunner::Run (loop/episode_runner.h): each
// episode's sequence and sample so far, and the environment calls that
// advance it, timed and counted.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "data/dataset.h"
#include "environment/environment.h"
#include "loop/turn_format.h"
#include "text/tokenizer.h"
#include "trellis/v1/environment.pb.h"
#include "trellis/v1/job.pb.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::loop::internal {

struct Episode {
  std::string id;
  // Names the episode's rows in the actor's requests (a row key's prompt
  // id): the same whatever else a round's request holds.
  uint64_t key = 0;
  uint64_t seed = 0;
  const v1::Prompt* prompt = nullptr;
  const data::Example* example = nullptr;
  std::vector<int32_t> sequence;  // prompt, then the response so far
  v1::Sample sample;              // response tokens, log-probs, trained mask
  float reward = 0;
  bool opened = false;
  v1::EpisodeEnd end = v1::EPISODE_END_UNSPECIFIED;
  absl::Time start;
  std::string action;  // the turn that waits for its Step
  std::unique_ptr<TurnFormat> format;

  bool live() const { return end == v1::EPISODE_END_UNSPECIFIED; }
};

// One Run's episodes and what their calls counted. Calls on different
// episodes may run at once; calls on one episode may not.
class Episodes {
 public:
  using Clock = std::function<absl::Time()>;

  Episodes(const v1::JobConfig& job, environment::Environment* environment,
           const text::Tokenizer* tokenizer, const Clock& now);

  std::vector<Episode>& all() { return episodes_; }
  int64_t limit() const { return limit_; }
  // How many environment calls may run at once (environment.workers, at
  // most the environment's MaxConcurrency).
  int workers() const { return workers_; }

  void Open(Episode& e);
  // Sends the episode's action; appends the observation, or ends it.
  void Step(Episode& e);
  void Close(Episode& e);

  // The policy's turn `turn` (a row of the actor's answer) appended; the
  // episode ends unless the turn ended on the stop.
  void Act(Episode& e, const v1::Sample& turn);

  // Adds `seconds` the runner waited on the environment with no generation
  // running (EnvironmentStats.unoverlapped_wait_seconds).
  void CountUnoverlapped(double seconds);

  // Stats of every episode, after Close.
  v1::EnvironmentStats Stats();

  // The first turn-format failure (a chat template that cannot be
  // continued): it fails the Run.
  absl::Status format_error();

 private:
  // Makes one environment call for `e`, timed and counted; a failure ends
  // the episode.
  template <typename Fn>
  auto Call(Episode& e, Fn fn) -> decltype(fn());

  void Count(absl::Time start, const absl::Status& status);

  // An observation as the episode's turn format rendered it: the prompt it
  // replaces, if any, then its text's tokens appended, untrained, as many
  // as the episode's token limit leaves (MAX_TOKENS when it cuts them). A
  // text the tokenizer cannot represent ends the episode; a format failure
  // too, and is kept for the Run.
  void Observe(Episode& e, const absl::StatusOr<TurnFormat::Rendered>& rendered);

  const v1::EnvironmentConfig& config_;
  environment::Environment* environment_;
  const text::Tokenizer* tokenizer_;
  const Clock& now_;
  const int64_t limit_;
  const int workers_;
  std::vector<Episode> episodes_;
  absl::Mutex mu_;
  v1::EnvironmentStats stats_ ABSL_GUARDED_BY(mu_);
  absl::Status format_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trellis::loop::internal

#endif  // TRELLIS_LOOP_INTERNAL_EPISODES_H_
