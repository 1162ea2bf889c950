#ifndef TRELLIS_PLUGIN_BREAKER_H_
#define TRELLIS_PLUGIN_BREAKER_H_

// The circuit breaker of the verifier and environment pools
// (verifier/pool.h, environment/pool.h): counts consecutive failed calls to
// a plugin, opens for a pause after `failures_to_open` of them, lets one
// trial call through after the pause (half-open), and says so in one log
// line per change of state, never per call: closed to failing ("failing:
// ..."), to open ("circuit open: ..."), open to half-open ("half-open:
// ..."), half-open to open again ("trial call failed: ..."), and failing
// or half-open to closed ("recovered after ..."). Each line starts with
// "<kind> <label>: ". Thread-safe; time is `env`'s clock, so a test's fake
// clock drives the pause.

#include <cstdint>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "env/env.h"

namespace trellis::plugin {

class Breaker {
 public:
  // `kind` ("verifier", "environment") and `label` ("name@version") name
  // the plugin in lines and details. `failures_to_open` <= 0: never opens.
  // REQUIRES: `env` outlives the breaker.
  Breaker(std::string kind, std::string label, int failures_to_open, absl::Duration pause,
          env::Env* env, std::function<void(const std::string& line)> log);

  // Before a call: "" to go ahead, else the detail of the ERROR ("circuit
  // open: ...") its items get instead.
  std::string Admit() ABSL_LOCKS_EXCLUDED(mu_);

  // After a call: `failed` when every item it answered was ERROR or
  // TIMEOUT, the first with `detail`. Returns whether it opened the
  // breaker.
  bool Observe(bool failed, const std::string& detail) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // kFailing: closed, with failed calls since the last good one; kTrial:
  // the pause is over and the next call decides.
  enum class State { kHealthy, kFailing, kOpen, kTrial };

  void Open(const std::string& detail) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string kind_;
  const std::string label_;
  const int failures_to_open_;  // 0: never opens
  const absl::Duration pause_;
  env::Env* const env_;
  const std::function<void(const std::string&)> log_;

  absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kHealthy;
  int64_t failures_ ABSL_GUARDED_BY(mu_) = 0;  // consecutive failed calls
  absl::Time open_until_ ABSL_GUARDED_BY(mu_);
  std::string open_detail_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trellis::plugin

#endif  // TRELLIS_PLUGIN_BREAKER_H_
