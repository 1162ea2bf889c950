#ifndef TRELLIS_ENVIRONMENT_POOL_H_
#define TRELLIS_ENVIRONMENT_POOL_H_

// The environment pool: what EnvironmentRegistry::Create wraps around every
// environment it makes.
//  - Deadline: each call (Open, Step, Close) runs on a thread of its own and
//    the caller waits at most environment.call_deadline_ms for it; a call
//    past it returns DeadlineExceeded while the inner call, left behind,
//    finishes when it will (the subprocess environment kills and restarts
//    its worker at the same deadline). The inner environment lives until
//    the last such call returns.
//  - Malformed replies: a non-finite reward, or metadata_json that is not a
//    JSON object, is InvalidArgument naming the call and the field.
//  - Circuit breaker (plugin/breaker.h): after environment.breaker_failures
//    consecutive failed calls, Open and Step are refused (Unavailable,
//    "circuit open: ...") for environment.breaker_pause_ms; then one trial
//    call decides. Close is always passed on, so episodes are freed.
// A failed call's status says which, as FailureReason (environment.h) names
// it: DeadlineExceeded ("deadline"), Unavailable ("unavailable", or
// "circuit_open" when the breaker refused it), InvalidArgument
// ("malformed"), anything else ("call_failed"). The caller counts them: the
// episode runner (loop/episode_runner.h) keeps one count per step.

#include <functional>
#include <memory>
#include <string>

#include "env/env.h"
#include "environment/environment.h"

namespace trellis::environment {

struct PoolOptions {
  // The clock of deadlines, the breaker's pause and wait_seconds; nullptr:
  // env::Env::Default().
  env::Env* env = nullptr;
  // Where the breaker's lines go (one per change of state); default stderr.
  std::function<void(const std::string& line)> log;
};

// "name@version", or "name" without a version.
std::string EnvironmentLabel(const v1::EnvironmentConfig& config);

// Wraps `inner` as above. REQUIRES: config.call_deadline_ms() >= 1.
std::unique_ptr<Environment> NewEnvironmentPool(std::unique_ptr<Environment> inner,
                                                const v1::EnvironmentConfig& config,
                                                PoolOptions options = {});

}  // namespace trellis::environment

#endif  // TRELLIS_ENVIRONMENT_POOL_H_
