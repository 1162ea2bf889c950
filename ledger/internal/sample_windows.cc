#include "ledger/internal/sample_windows.h"

namespace trellis::ledger::internal {

SampleWindows::SampleWindows()
    : tensors_(MemoryTracker::installed() ? std::make_unique<PeakWindow>() : nullptr),
      heap_(HeapCounted() ? std::make_unique<HeapWindow>() : nullptr) {}

TrackerLook SampleWindows::Take() {
  TrackerLook look;
  const bool tracking = MemoryTracker::installed();
  if (tracking) {
    look.live_bytes = MemoryTracker::Get().live_bytes();
    look.mapped_bytes = MemoryTracker::Get().live_mapped_bytes();
  }
  look.peak_since_bytes = look.live_bytes;
  look.mapped_at_peak_bytes = look.mapped_bytes;
  if (tensors_ != nullptr && tensors_->peak_bytes() > look.live_bytes) {
    look.peak_since_bytes = tensors_->peak_bytes();
    look.mapped_at_peak_bytes = tensors_->mapped_at_peak_bytes();
  }
  look.heap_counted = HeapCounted();
  if (look.heap_counted) {
    look.heap_live_bytes = HeapCount().live();
    look.heap_peak_since_bytes = heap_ != nullptr ? heap_->peak_bytes() : look.heap_live_bytes;
  }
  // The next windows open after the old ones close: a slot freed is reused.
  tensors_.reset();
  heap_.reset();
  if (tracking) tensors_ = std::make_unique<PeakWindow>();
  if (look.heap_counted) heap_ = std::make_unique<HeapWindow>();
  return look;
}

}  // namespace trellis::ledger::internal
