#ifndef TRELLIS_VERIFIER_POOL_H_
#define TRELLIS_VERIFIER_POOL_H_

// The verifier pool: what VerifierRegistry::Create wraps around every
// verifier it makes (built-ins, subprocess, code_exec, remote), so that
// each gets the same
//  - result cache: keyed by name@version, prompt, response, ground truth
//    and metadata; LRU-bounded by verifier.cache_entries (0: off); keeps
//    only CORRECT, WRONG and UNPARSEABLE results; equal items of one batch
//    are verified once (counted as cache hits);
//  - circuit breaker: a call to the verifier fails when every item it
//    answered came back ERROR or TIMEOUT (a verifier called item by item:
//    that item; one that PrefersBatches(): the whole batch). After
//    verifier.breaker_failures consecutive failed calls the verifier is not
//    called for verifier.breaker_pause_ms: items get ERROR "circuit open:
//    ..." (VerifyResult.failure CIRCUIT_OPEN) with reward_wrong. After the
//    pause the next call is a trial: a good one closes the breaker, a
//    failed one opens it again. Any good call resets the count; 0 turns
//    the breaker off;
//  - one log line per change of the verifier's state, never per call:
//    healthy -> failing (the first failed call, with its detail) -> open
//    (the breaker opened) -> recovered (a good call after failures);
//  - stats (v1::VerifierStats) per request: items, cache hits, timeouts
//    and errors (each by reason), retries, breaker openings and
//    rejections, the name@version the verifier reported, and the per-item
//    latency (p50 / p99 of the wall time of the call that verified each
//    item: Verify(item), or for a verifier that PrefersBatches() the one
//    VerifyBatch call of the request's cache misses).
// Verifiers that do not PrefersBatches() are called item by item from
// MaxConcurrency() threads (the subprocess pool: its workers, as it used
// them already); results are identical to the unwrapped verifier's
// when nothing fails (a deterministic verifier gives the same result from
// the cache as from a call).
//
// Retries are the verifier's: subprocess retries an item whose worker
// died (verifier.retries), remote retries a call that found the service
// unavailable; both report them in VerifyResult.retries. The pool does not
// retry ERROR and TIMEOUT verdicts (they are answers); a held-out
// evaluation does (eval.verify_retries, loop/driver.cc).

#include <functional>
#include <memory>
#include <string>

#include "env/env.h"
#include "trellis/v1/job.pb.h"
#include "verifier/verifier.h"

namespace trellis::verifier {

struct PoolOptions {
  // The clock of the breaker's pause, the latencies and the wait seconds
  // (default: env::Env::Default()). REQUIRES: outlives the pool.
  env::Env* env = nullptr;
  // Where the breaker's log lines go (default: a line on stderr).
  std::function<void(const std::string& line)> log;
};

// REQUIRES: `inner` is not null. The config is the job's verifier section
// (name, version, cache_entries, breaker_*, reward_wrong); validated by the registry's factories
// and config/job_validate.cc.
std::unique_ptr<Verifier> NewVerifierPool(std::unique_ptr<Verifier> inner,
                                          const v1::VerifierConfig& config,
                                          PoolOptions options = {});

// "name@version", or "name" when the version is empty.
std::string VerifierLabel(const v1::VerifierConfig& config);

}  // namespace trellis::verifier

#endif  // TRELLIS_VERIFIER_POOL_H_
