#ifndef TRELLIS_LEDGER_MEMORY_SOURCE_H_
#define TRELLIS_LEDGER_MEMORY_SOURCE_H_

// A memory counter the ledger reads at the edges of its spans and steps:
// the bytes allocated and reserved now, and their highest values since the
// last ResetPeakStats. The CPU MemoryTracker (c10's CPU allocator, whose
// reserved equals allocated: it caches nothing) and the CUDA caching
// allocator of one device (ledger/cuda_memory.h) implement it; tests inject
// fakes (ledger/testing/fake_memory_source.h).
//
// Its peak is one counter for the whole process or device, not one per
// thread or window: internal/source_windows.h turns it into nested and
// overlapping windows.

#include <cstdint>
#include <string>

namespace trellis::ledger {

struct MemoryStats {
  // Bytes in live tensors (for the CUDA allocator: their blocks, rounded
  // up to its 512-byte granularity).
  int64_t allocated_bytes = 0;
  // Bytes the allocator holds: live blocks and its cache of free ones.
  int64_t reserved_bytes = 0;
  // The highest of each since the last ResetPeakStats (or start).
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;
};

class MemorySource {
 public:
  virtual ~MemorySource() = default;
  // What it counts: "cpu", "cuda:0".
  virtual std::string name() const = 0;
  virtual MemoryStats Stats() const = 0;
  // Starts new peaks at the current values.
  virtual void ResetPeakStats() = 0;
};

}  // namespace trellis::ledger

#endif  // TRELLIS_LEDGER_MEMORY_SOURCE_H_
