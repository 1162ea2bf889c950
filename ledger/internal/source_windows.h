#ifndef TRELLIS_LEDGER_INTERNAL_SOURCE_WINDOWS_H_
#define TRELLIS_LEDGER_INTERNAL_SOURCE_WINDOWS_H_

// Peak windows over a MemorySource whose peak is one counter for the whole
// device (the CUDA caching allocator's peak stats are per device, not per
// thread or scope). Windows may nest and overlap across threads freely:
// every Open and Close first folds the source's peak since the previous
// fold into every open window's peak, then resets the source's peak. The
// time between two folds so lies wholly inside or wholly outside each
// window, and a window's peak is the highest of the folds it spans: the
// device's highest allocated and reserved bytes while it was open, as
// MemoryTracker's PeakWindow gives on the CPU. Like the CPU tracker's, a
// window counts every thread's allocations on the device, not only its
// own.
//
// The windows own the source's peak: nothing else may reset it. A spike
// that rises and falls between a fold's read and its reset (the two calls
// of one fold) is lost.
//
// Thread-safe.

#include <cstdint>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "ledger/memory_source.h"

namespace trellis::ledger::internal {

class SourceWindows {
 public:
  // REQUIRES: `source` outlives the windows.
  explicit SourceWindows(MemorySource* source);

  // Opens a window at the source's current bytes; returns its id.
  int Open();
  // Closes window `id`: its peaks, and the allocated and reserved bytes
  // now. REQUIRES: `id` came from Open and was not closed.
  MemoryStats Close(int id);

 private:
  void Fold() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  MemorySource* const source_;
  absl::Mutex mu_;
  int next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int, MemoryStats> open_ ABSL_GUARDED_BY(mu_);
  // The source's values read by the last fold.
  MemoryStats now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trellis::ledger::internal

#endif  // TRELLIS_LEDGER_INTERNAL_SOURCE_WINDOWS_H_
