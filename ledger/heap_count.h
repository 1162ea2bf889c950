#ifndef TRELLIS_LEDGER_HEAP_COUNT_H_
#define TRELLIS_LEDGER_HEAP_COUNT_H_

// The C heap's bytes in use, counted block by block by the malloc hook
// (ledger/heap_hook.cc) in a program that links it (the `trellis` binary):
// usable bytes of live blocks, with peak windows, so that a peak of the
// heap between two process samples (a tokenizer's JSON parsed and freed, a
// message decoded) is seen. mallinfo2 (ledger/process_memory.h) says only
// what the heap holds at the moment it is asked.

#include <cstdint>

#include "ledger/peak_slots.h"

namespace trellis::ledger {

// The count the hook keeps (zero everywhere without the hook).
PeakSlots& HeapCount();
// Whether the hook is counting in this program.
bool HeapCounted();

// The heap's highest live bytes since this window opened, as HeapCount()
// counts them.
class HeapWindow {
 public:
  HeapWindow();
  ~HeapWindow();
  HeapWindow(const HeapWindow&) = delete;
  HeapWindow& operator=(const HeapWindow&) = delete;

  // At least the live bytes at the opening; without a free slot, those.
  int64_t peak_bytes() const;

 private:
  int slot_;
  int64_t start_live_;
};

}  // namespace trellis::ledger

#endif  // TRELLIS_LEDGER_HEAP_COUNT_H_
