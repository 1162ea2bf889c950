#ifndef TRELLIS_TOOLS_COMPARE_H_
#define TRELLIS_TOOLS_COMPARE_H_

// `trellis compare RUN_A RUN_B [...]`: a strategy comparison (DESIGN.md §5).
// RUN_A is the baseline, the others candidates, each a run directory that
// `trellis run` wrote (job.yaml, summary.json, ledger.jsonl). Side by side:
// what each changed in the job, the peak and its source (role, stage, the
// objects resident at it, the unattributed remainder), stage seconds per
// step, step time, tokens/s, the learner's achieved FLOP/s against this
// machine's matrix-product rate, the quality gate, communication bytes,
// device-host moves (when a run has them) and failures. The verdict ranks
// candidates by whether they keep quality (within `quality_tolerance` of the
// baseline) and then by step time within the budget (`step_time_budget`
// times the baseline's) — not by least memory. A strategy is whatever
// differs in job.yaml, so new ones (activation checkpointing, LoRA, ...)
// need nothing here.

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "absl/status/statusor.h"
#include "ledger/attribution.h"

namespace trellis::tools {

struct CompareOptions {
  // Largest drop of the quality metric a candidate may have (absolute).
  double quality_tolerance = 0.02;
  // A candidate's mean step time may be at most this times the baseline's.
  double step_time_budget = 1.25;
  // FLOP/s of a matrix product on this machine (model::MeasureMatmulRate);
  // 0 leaves utilization out.
  double matmul_flops_per_second = 0;
};

// One process's memory at its resident peak: the tensors live then
// (allocated), the C heap's bytes held, the peak, and the bytes named of it.
struct ProcessFacts {
  int64_t allocated_bytes = 0;
  int64_t heap_held_bytes = 0;
  int64_t resident_peak_bytes = 0;
  int64_t named_bytes = 0;
};

struct RunFacts {
  std::string dir;
  // Job fields that differ from the baseline's ("" for the baseline).
  std::vector<std::string> changes;
  // Changes to the workload itself (model, data, seed, batch, steps): the
  // comparison is not on a fixed workload.
  std::vector<std::string> workload_changes;
  int64_t peak_bytes = 0;
  // The role peak that is the run's peak, attributed.
  ledger::PeakAttribution peak;
  // learner-0's own peak, where the memory strategies act (empty role when
  // the run has none).
  ledger::PeakAttribution learner_peak;
  // Mean seconds per step record, per stage, and of the whole step.
  std::map<std::string, double> stage_seconds;
  double step_seconds = 0;
  int64_t steps = 0;
  double generated_tokens_per_second = 0;
  double trained_tokens_per_second = 0;
  // Matrix-product FLOP/s the learner's update achieved (samples x sequence
  // x train FLOPs per token / update seconds), and its fraction of the rate.
  double learner_flops_per_second = 0;
  double utilization = 0;
  // eval.after.accuracy when the run evaluated, else the mean training
  // reward of its last 10 steps.
  std::string quality_metric;
  double quality = 0;
  // Bytes of every weight handoff (learner to actors).
  int64_t communication_bytes = 0;
  // Per step (mean): seconds of the update spent recomputing checkpointed
  // blocks, and the learner ranks' gradient and parameter traffic (ZeRO).
  double recompute_seconds = 0;
  double learner_communication_bytes = 0;
  double learner_communication_seconds = 0;
  // Per step (mean): bytes and seconds of the roles' moves between device
  // and host (CPU offload, the colocated placement), both directions.
  double move_bytes = 0;
  double move_seconds = 0;
  // Each process of the run side by side (summary.json memory.process,
  // named "process" for an embedded run and "scheduler" for a launched
  // one, and memory.worker_processes by worker; none in runs recorded
  // before them).
  std::map<std::string, ProcessFacts> processes;
  // Verifier errors and timeouts, dropped samples.
  int64_t failures = 0;
};

struct Verdict {
  std::string dir;
  int rank = 0;  // 1 is best; candidates only.
  bool quality_kept = false;
  bool within_budget = false;
  double step_time_ratio = 0;  // candidate / baseline
  double peak_ratio = 0;       // candidate / baseline
  std::string reason;
};

struct Comparison {
  CompareOptions options;
  std::vector<RunFacts> runs;  // baseline first
  std::vector<Verdict> verdicts;  // candidates, best first
};

// Reads the runs; fails with NotFound / DataLoss naming the file when a run
// directory lacks or has a malformed job.yaml, summary.json or ledger.jsonl.
// REQUIRES: at least two directories.
[[nodiscard]] absl::StatusOr<Comparison> CompareRuns(const std::vector<std::string>& dirs,
                                                     const CompareOptions& options);

void PrintComparison(const Comparison& comparison, std::ostream& out);
std::string ComparisonMarkdown(const Comparison& comparison);
nlohmann::json ComparisonJson(const Comparison& comparison);

}  // namespace trellis::tools

#endif  // TRELLIS_TOOLS_COMPARE_H_
