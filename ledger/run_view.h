#ifndef TRELLIS_LEDGER_RUN_VIEW_H_
#define TRELLIS_LEDGER_RUN_VIEW_H_

// What a person watching a run sees, built from its ledger records (the
// lines of ledger.jsonl, ledger/README.md) and nothing else: the step
// table, every span (a stage of a role, for the timeline), memory by
// object over time, handoffs, verifier waits, evals; and the Prometheus
// metric families of the run (docs in README "Watching a job").
//
// The live dashboard feeds it from Ledger::AddRecordObserver; `trellis
// report` feeds it the finished run's ledger.jsonl. Both render ViewJson()
// with the same page (web/), so the two show the same thing.
//
// Thread-safe.

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "ledger/prometheus.h"

namespace trellis::ledger {

class RunView {
 public:
  RunView();
  ~RunView();
  RunView(const RunView&) = delete;
  RunView& operator=(const RunView&) = delete;

  // Adds one record. InvalidArgument, quoting the start of the record, when
  // it is not a JSON object with a string "type"; records of types it does
  // not show are counted and otherwise ignored.
  [[nodiscard]] absl::Status Add(std::string_view record);
  // Adds every line of a ledger.jsonl file; NotFound when it cannot be
  // read, InvalidArgument naming the line of a bad record.
  [[nodiscard]] absl::Status AddFile(const std::string& path);

  // The view as JSON text (its keys are documented in web/dashboard.js,
  // which draws it). The timeline keeps the newest kMaxSpans spans and
  // the memory series at most kMaxMemoryPoints points (older points are
  // thinned, never the newest).
  std::string ViewJson() const;
  static constexpr int kMaxSpans = 4000;
  static constexpr int kMaxMemoryPoints = 2000;

  // Appends the run's metric families: trellis_step, trellis_steps_total,
  // trellis_step_seconds, trellis_stage_seconds{stage,role},
  // trellis_rollout_update_ratio, trellis_verifier_wait_seconds{verifier},
  // trellis_device_memory_peak_bytes{device,kind} (kind: allocated,
  // reserved, fragmentation; the last step's, with devices in the ledger),
  // trellis_effective_sample_rate, trellis_samples_generated_total,
  // trellis_samples_effective_total, trellis_samples_lost_total{reason},
  // trellis_handoff_seconds{phase}, trellis_handoff_bytes_total,
  // trellis_tokens_per_second{kind}, trellis_tokens_total{kind},
  // trellis_memory_bytes{role,object}, trellis_memory_peak_bytes{role,object},
  // trellis_eval_accuracy{label}, trellis_mean_reward,
  // trellis_ledger_records_total. kProcess: only what one worker process's
  // ledger has (trellis_stage_seconds, trellis_memory_bytes,
  // trellis_memory_peak_bytes, trellis_ledger_records_total).
  enum class Scope { kJob, kProcess };
  void WriteMetrics(PrometheusText& out, Scope scope = Scope::kJob) const;

  // The step of the newest record (-1 before any, or during set-up).
  int64_t current_step() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace trellis::ledger

#endif  // TRELLIS_LEDGER_RUN_VIEW_H_
