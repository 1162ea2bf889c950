#ifndef TRELLIS_LEDGER_INTERNAL_METRICS_H_
#define TRELLIS_LEDGER_INTERNAL_METRICS_H_

// Step-metric derivation and the JSON shapes shared by ledger.jsonl and
// summary.json (schema: ledger/README.md). Pure functions; no state.

#include <array>
#include <cstdint>
#include <map>
#include <string>

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

// {"matmul_peak_gflops_per_second": peak / 1e9, "stages": {stage: {"flops",
// "gflops_per_second", "peak_fraction"}}} for the stages that recorded
// arithmetic: their FLOP, FLOP over their seconds (10^9 FLOP/s), and that
// rate over `peak` (0 without a peak).
nlohmann::json ComputeJson(const std::array<double, kNumStages>& flops,
                           const std::array<double, kNumStages>& seconds, double peak);

// Every StepCounts and StepMetrics field, flat, named as in the structs,
// with stage_seconds and compute (ComputeJson) nested. No "type" key.
nlohmann::json StepMetricsJson(const StepMetrics& m);
// A PromptAccount as {drawn, trained, dropped: {reason: n}, in_flight,
// reconciles}; PromptAccountFromJson reads it back (absent keys: 0).
nlohmann::json PromptAccountJson(const PromptAccount& a);
PromptAccount PromptAccountFromJson(const nlohmann::json& j);

// Adds every integer count of `step` to `total` (step, policy_version and
// the per-prompt setting are overwritten with the latest instead).
void AccumulateCounts(const StepCounts& step, StepCounts& total);

// An eval's fields (no "type", "step" or "label"): prompts, accuracy,
// mean_reward (null for an incomplete evaluation), and loss / reward_margin
// when set. EvalMetricsFromJson reads it back (throws nlohmann::json
// exceptions).
nlohmann::json EvalMetricsJson(const EvalMetrics& e);
EvalMetrics EvalMetricsFromJson(const nlohmann::json& j);

// A VerifierStats as a "verifier" record's fields (no "type", no "step").
nlohmann::json VerifierStatsJson(const v1::VerifierStats& s);
// Adds the counts and seconds of `s` to `total`; keeps the highest p99.
void AddVerifierStats(const v1::VerifierStats& s, v1::VerifierStats& total);
// summary.json "verifiers": {name: {counts, wait_seconds,
// latency_p99_seconds_max}}; ExportState uses the same shape, and
// VerifierTotalsFromJson reads it back (throws nlohmann::json exceptions).
nlohmann::json VerifierTotalsJson(const std::map<std::string, v1::VerifierStats>& totals);
std::map<std::string, v1::VerifierStats> VerifierTotalsFromJson(const nlohmann::json& j);

}  // namespace trellis::ledger::internal

#endif  // TRELLIS_LEDGER_INTERNAL_METRICS_H_
