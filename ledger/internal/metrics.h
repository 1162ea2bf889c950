#ifndef TRELLIS_LEDGER_INTERNAL_METRICS_H_
#define TRELLIS_LEDGER_INTERNAL_METRICS_H_

// Step-metric derivation and the JSON shapes shared by ledger.jsonl and
// summary.json (schema: ledger/README.md). Pure functions; no state.

#include <array>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "ledger/ledger.h"

namespace trellis::ledger::internal {

// a / b, or 0 when b is not positive (nothing measured yet).
double SafeDiv(double a, double b);

// Fills the derived fields of `m` from its measured ones (counts,
// stage_seconds, step_seconds, handoff, peak):
// rollout_update_ratio = rollout s / update s; verifier_wait = verify s;
// effective_sample_rate = effective / generated; generated tokens/s over
// the rollout seconds, trained tokens/s over the update seconds. Each is 0
// when its denominator is 0.
void DeriveStepMetrics(StepMetrics& m);

// {"load": s, "sft": s, ...} for every stage.
nlohmann::json StageSecondsJson(const std::array<double, kNumStages>& s);

// Every StepCounts and StepMetrics field, flat, named as in the structs,
// with stage_seconds nested. No "type" key.
nlohmann::json StepMetricsJson(const StepMetrics& m);

// Adds every integer count of `step` to `total` (step, policy_version and
// the per-prompt setting are overwritten with the latest instead).
void AccumulateCounts(const StepCounts& step, StepCounts& total);

}  // namespace trellis::ledger::internal

#endif  // TRELLIS_LEDGER_INTERNAL_METRICS_H_
