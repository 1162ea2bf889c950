#include "ledger/internal/source_windows.h"

#include <algorithm>

namespace trellis::ledger::internal {

SourceWindows::SourceWindows(MemorySource* source) : source_(source) {}

void SourceWindows::Fold() {
  now_ = source_->Stats();
  for (auto& [id, w] : open_) {
    w.peak_allocated_bytes = std::max(w.peak_allocated_bytes, now_.peak_allocated_bytes);
    w.peak_reserved_bytes = std::max(w.peak_reserved_bytes, now_.peak_reserved_bytes);
  }
  source_->ResetPeakStats();
}

int SourceWindows::Open() {
  absl::MutexLock lock(&mu_);
  Fold();
  const int id = next_id_++;
  open_[id] = {now_.allocated_bytes, now_.reserved_bytes, now_.allocated_bytes,
               now_.reserved_bytes};
  return id;
}

MemoryStats SourceWindows::Close(int id) {
  absl::MutexLock lock(&mu_);
  Fold();
  MemoryStats w = open_.at(id);
  open_.erase(id);
  w.allocated_bytes = now_.allocated_bytes;
  w.reserved_bytes = now_.reserved_bytes;
  return w;
}

}  // namespace trellis::ledger::internal
