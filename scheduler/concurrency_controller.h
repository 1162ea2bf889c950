#ifndef TRELLIS_SCHEDULER_CONCURRENCY_CONTROLLER_H_
#define TRELLIS_SCHEDULER_CONCURRENCY_CONTROLLER_H_

// One actor's decode batch under sampling.concurrency AUTO: how many rows
// the actor decodes at once (GenerateRequest.decode_token_budget), chosen
// request by request from the actor's own throughput. A pure class: it is
// fed what each request measured and returns the next bound; no clock.
//
// Throughput is generated tokens / decode seconds of the request. The rows
// that wait for a slot in the decode batch (the request's queue) wait
// inside those seconds: a bound too small shows as the rows' queue wait
// stretching the decode, a bound past the knee as each step's forward
// growing as fast as the batch. The actor serves one request at a time,
// so nothing else queues in front of it.
//
// Growing: the bound multiplies by `growth` while throughput rises by more
// than `rise` (relative); the first bound that does not raise it ends the
// growth and the controller settles on the bound before it (the knee: as
// fast, fewer rows held). Settled: every `reprobe_every` requests it tries
// one bound up (a rise over the settled throughput resumes growing) and
// then one down (a throughput within `rise` of the settled one means the
// knee moved down: it settles there), so a knee that moves with the load
// or the response lengths is found again. The settled throughput is a
// moving average, so one noisy request does not move the knee.

#include <cstdint>

#include "absl/status/status.h"

namespace trellis::scheduler {

struct ConcurrencyOptions {
  // The first bound tried (clamped to the request's rows).
  int64_t initial = 1;
  double growth = 2;
  double rise = 0.1;
  int64_t reprobe_every = 8;
  // Weight of the newest settled request in the settled throughput.
  double smoothing = 0.25;
};

// InvalidArgument naming the option: initial >= 1, growth > 1, rise in
// (0, 1), reprobe_every >= 1, smoothing in (0, 1].
[[nodiscard]] absl::Status ValidateConcurrencyOptions(const ConcurrencyOptions& options);

// What one request of the actor measured.
struct ConcurrencyObservation {
  int64_t budget = 0;  // the bound the actor used (GenerateResponse.decode_token_budget)
  int64_t rows = 0;    // rows of the request: responses_per_prompt x prompts
  int64_t generated_tokens = 0;
  double decode_seconds = 0;
};

class ConcurrencyController {
 public:
  // `options` must pass ValidateConcurrencyOptions.
  explicit ConcurrencyController(const ConcurrencyOptions& options);

  // The bound for the actor's next request of `rows` rows, in [1, rows].
  int64_t Budget(int64_t rows) const;
  // Feeds one answered request. One that decoded nothing (no tokens or no
  // decode time) says nothing about throughput and is ignored.
  void Observe(const ConcurrencyObservation& observation);

  // The bound settled on; 0 while still growing.
  int64_t settled_budget() const { return phase_ == Phase::kGrow ? 0 : settled_budget_; }

 private:
  enum class Phase { kGrow, kSettled, kProbeUp, kProbeDown };

  void Settle(int64_t budget, double rate);
  void Grow(int64_t from, double rate, int64_t rows);
  int64_t Up(int64_t budget) const;
  int64_t Down(int64_t budget) const;

  ConcurrencyOptions options_;
  Phase phase_ = Phase::kGrow;
  int64_t budget_;  // the bound to ask next
  // Growing: the bound before and its throughput (0: none yet).
  int64_t previous_budget_ = 0;
  double previous_rate_ = 0;
  int64_t settled_budget_ = 0;
  double settled_rate_ = 0;
  int64_t since_probe_ = 0;  // settled requests since the last probe
};

}  // namespace trellis::scheduler

#endif  // TRELLIS_SCHEDULER_CONCURRENCY_CONTROLLER_H_
