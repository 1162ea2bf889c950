#ifndef TRELLIS_VERIFIER_INTERNAL_BREAKER_H_
#define TRELLIS_VERIFIER_INTERNAL_BREAKER_H_

// The verifier pool's circuit breaker (verifier/pool.h): counts consecutive
// failed calls to a verifier, opens for a pause after
// config.breaker_failures of them, lets one trial call through after the
// pause, and says so in one log line per change of state (failing, open,
// recovered), never per call. Thread-safe.

#include <cstdint>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "env/env.h"
#include "trellis/v1/job.pb.h"

namespace trellis::verifier::internal {

class Breaker {
 public:
  // `label` names the verifier in lines and details ("name@version").
  // REQUIRES: `env` outlives the breaker.
  Breaker(std::string label, const v1::VerifierConfig& config, env::Env* env,
          std::function<void(const std::string& line)> log);

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

}  // namespace trellis::verifier::internal

#endif  // TRELLIS_VERIFIER_INTERNAL_BREAKER_H_
