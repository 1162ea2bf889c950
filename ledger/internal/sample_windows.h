#ifndef TRELLIS_LEDGER_INTERNAL_SAMPLE_WINDOWS_H_
#define TRELLIS_LEDGER_INTERNAL_SAMPLE_WINDOWS_H_

// The ledger's view of its counters from one process sample to the next
// (ledger/process_memory.h ProcessMemoryWatch::Observe): the memory
// tracker's tensors and, where the malloc hook counts, the C heap, each
// with its peak since the previous sample. Not thread-safe: the ledger
// takes its samples under its mutex.

#include <memory>

#include "ledger/heap_count.h"
#include "ledger/memory_tracker.h"
#include "ledger/process_memory.h"

namespace trellis::ledger::internal {

class SampleWindows {
 public:
  // Windows open from construction (the ledger's start).
  SampleWindows();

  // The counters now, with their peaks since the previous Take (or the
  // construction); starts the next windows.
  TrackerLook Take();

 private:
  std::unique_ptr<PeakWindow> tensors_;  // null: the tracker is not installed
  std::unique_ptr<HeapWindow> heap_;     // null: the malloc hook is not linked
};

}  // namespace trellis::ledger::internal

#endif  // TRELLIS_LEDGER_INTERNAL_SAMPLE_WINDOWS_H_
