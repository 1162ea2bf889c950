#include "ledger/heap_count.h"

#include <algorithm>

namespace trellis::ledger {
namespace {

// Constant-initialized and trivially destroyed: malloc may run before main
// and after exit.
constinit PeakSlots g_heap;

}  // namespace

PeakSlots& HeapCount() { return g_heap; }

// The program holds live blocks from its start once the hook counts them.
bool HeapCounted() { return g_heap.live() > 0; }

HeapWindow::HeapWindow() : slot_(g_heap.Open()), start_live_(g_heap.live()) {}

HeapWindow::~HeapWindow() {
  if (slot_ >= 0) g_heap.Close(slot_);
}

int64_t HeapWindow::peak_bytes() const {
  return slot_ >= 0 ? std::max(g_heap.Peak(slot_), start_live_) : start_live_;
}

}  // namespace trellis::ledger
