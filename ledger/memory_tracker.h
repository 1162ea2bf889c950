#ifndef TRELLIS_LEDGER_MEMORY_TRACKER_H_
#define TRELLIS_LEDGER_MEMORY_TRACKER_H_

// Counts every byte LibTorch allocates on the CPU, through c10's allocator
// hook: live bytes now, the peak since the last mark, and allocation counts.

#include <cstdint>

namespace trellis::ledger {

class MemoryTracker {
 public:
  // The process-wide tracker. Install() puts it in front of c10's default
  // CPU allocator; before that every count stays zero.
  static MemoryTracker& Get();
  // Idempotent. Call once from main (or a test) before creating tensors
  // that should be counted; tensors made earlier are freed uncounted.
  static void Install();
  static bool installed();

  int64_t live_bytes() const;
  // Highest live_bytes since the last ResetPeak (or start).
  int64_t peak_bytes() const;
  // Sets the peak to max(current peak, bytes); used to restore an outer
  // window's peak after an inner window closes.
  void RaisePeak(int64_t bytes);
  // Starts a new peak window at the current live bytes; returns the peak of
  // the window that ended.
  int64_t ResetPeak();
  int64_t allocations() const;
};

// Measures the peak inside a scope without losing the enclosing scope's
// peak: nested windows compose.
class PeakWindow {
 public:
  PeakWindow();
  ~PeakWindow();
  PeakWindow(const PeakWindow&) = delete;
  PeakWindow& operator=(const PeakWindow&) = delete;

  int64_t start_live_bytes() const { return start_live_; }
  // Peak since this window opened (so far).
  int64_t peak_bytes() const;

 private:
  int64_t outer_peak_;
  int64_t start_live_;
};

}  // namespace trellis::ledger

#endif  // TRELLIS_LEDGER_MEMORY_TRACKER_H_
