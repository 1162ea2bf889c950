#ifndef TRELLIS_LAUNCH_LEDGER_FORWARDER_H_
#define TRELLIS_LAUNCH_LEDGER_FORWARDER_H_

// A launched worker's ledger records on their way to the scheduler, off
// the training step's path. Add() only appends to a buffer; a background
// flusher sends the buffer as one LedgerReport when the step advances
// (StepAdvanced: the scheduler's step, from a heartbeat reply), when the
// buffer reaches `flush_at` records, and at Close(). So a worker makes at
// most one call per step (plus one per `flush_at` records and one at
// exit), and a slow scheduler delays only the flusher. Records keep the
// order they were added in, within and across calls. The worker's process
// memory (SetProcess) rides on the next report, alone when no record is
// buffered.
//
// Thread-safe.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "ledger/ledger.h"
#include "trellis/v1/scheduler.pb.h"

namespace trellis::launch {

// A worker ledger's forwarded record (Ledger::ForwardRecords) as a
// LedgerReport carries it, with ledger/kinds.h's names.
v1::LedgerRecord ToLedgerRecord(const ledger::ForwardedRecord& record);

class LedgerForwarder {
 public:
  // Delivers one report (a ReportLedger call); may block.
  using Send = std::function<absl::Status(const v1::LedgerReport& report)>;
  struct Options {
    // Buffered records that make the flusher send before the step ends.
    int64_t flush_at = 1024;
    // Records held at most while a call is in flight; beyond it a record
    // is dropped (and counted), so a stalled scheduler cannot grow the
    // worker without bound.
    int64_t capacity = 1 << 16;
  };
  // What happened to the records added so far.
  struct Counts {
    int64_t recorded = 0;  // Add() calls.
    int64_t sent = 0;      // In reports whose call succeeded.
    int64_t dropped = 0;   // Over capacity, never sent.
    int64_t lost = 0;      // In reports whose call failed.
    int64_t calls = 0;     // Send calls made.
  };

  // Starts the flusher. `send` is called from it only, one call at a time.
  LedgerForwarder(std::string worker_id, Send send, Options options);
  LedgerForwarder(std::string worker_id, Send send)
      : LedgerForwarder(std::move(worker_id), std::move(send), Options()) {}
  // Close()s.
  ~LedgerForwarder();
  LedgerForwarder(const LedgerForwarder&) = delete;
  LedgerForwarder& operator=(const LedgerForwarder&) = delete;

  // Buffers `record`; never waits for a call.
  void Add(v1::LedgerRecord record);
  // The worker's process memory now; the next report carries it (the
  // latest set replaces one not yet sent). Never waits for a call.
  void SetProcess(v1::ProcessMemory process);
  // The job is in `step` now: if that is a step not seen before, the
  // buffer goes in one call. Never waits for a call.
  void StepAdvanced(int64_t step);
  // The highest step whose records were delivered (the call after
  // StepAdvanced(step) returned, or there was nothing to send); -1 before.
  int64_t delivered_step() const;
  // Sends what is buffered, stops the flusher and returns the counts.
  // Later Add()s are counted as dropped.
  Counts Close();
  Counts counts() const;

 private:
  void Flush();

  const std::string worker_id_;
  const Send send_;
  const Options options_;
  mutable absl::Mutex mu_;
  std::vector<v1::LedgerRecord> buffer_ ABSL_GUARDED_BY(mu_);
  std::optional<v1::ProcessMemory> process_ ABSL_GUARDED_BY(mu_);
  // The newest step seen, and the one whose records are out.
  int64_t step_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t delivered_step_ ABSL_GUARDED_BY(mu_) = -1;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  Counts counts_ ABSL_GUARDED_BY(mu_);
  std::thread flusher_;
};

}  // namespace trellis::launch

#endif  // TRELLIS_LAUNCH_LEDGER_FORWARDER_H_
