#ifndef TRELLIS_LEDGER_MEMORY_TRACKER_H_
#define TRELLIS_LEDGER_MEMORY_TRACKER_H_

// Counts every byte LibTorch allocates on the CPU, through c10's allocator
// hook: live bytes now, the peak since the last mark, and allocation counts.
//
// Only allocations made through c10's CPU allocator are seen (at::empty and
// everything built on it); memory that BLAS, oneDNN or std containers take
// for themselves is not. Counts are requested bytes, not allocator overhead.
//
// Thread-safe: every count is an atomic, and any number of threads may hold
// PeakWindows at once.

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "ledger/memory_source.h"
#include "ledger/peak_slots.h"

namespace trellis::ledger {

// As a MemorySource: allocated and reserved are both live_bytes (c10's CPU
// allocator caches nothing), the peaks both peak_bytes.
class MemoryTracker final : public MemorySource {
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
  // Number of allocations counted since Install().
  int64_t allocations() const;
  // Live bytes of allocations of at least kMappedFloor: those glibc's
  // malloc serves with mmap of their own and gives back to the system when
  // freed (its dynamic mmap threshold never rises above 32 MiB on 64-bit).
  int64_t live_mapped_bytes() const;
  static constexpr int64_t kMappedFloor = int64_t{32} << 20;

  std::string name() const override { return "cpu"; }
  MemoryStats Stats() const override;
  void ResetPeakStats() override { ResetPeak(); }

  // PeakWindows that can be open at once, across all threads. A window
  // opened beyond this reports peak_bytes() as the tracker's global peak, an
  // upper bound.
  static constexpr int kMaxWindows = PeakSlots::kMaxWindows;

 private:
  friend class PeakWindow;
  friend class TrackingAllocator;  // memory_tracker.cc

  MemoryTracker() = default;
  void Add(int64_t bytes);
  void Sub(int64_t bytes);

  // Live bytes with the windows' peaks (PeakWindow), and beside each
  // window's peak the mapped live bytes at it (stored after the peak, so a
  // racing allocation may pair the two a little apart).
  PeakSlots live_;
  std::atomic<int64_t> peak_{0};
  std::atomic<int64_t> allocations_{0};
  std::atomic<int64_t> live_mapped_{0};
  std::array<std::atomic<int64_t>, kMaxWindows> window_mapped_{};
};

// Measures the peak inside a scope without losing the enclosing scope's
// peak: nested windows compose, and so do windows that overlap on different
// threads. A window does not touch the tracker's global peak (ResetPeak /
// peak_bytes); it keeps a peak of its own. It need not live on the stack
// (the ledger holds one per step), but it must be closed on any thread only
// once, by its destructor.
class PeakWindow {
 public:
  PeakWindow();
  ~PeakWindow();
  PeakWindow(const PeakWindow&) = delete;
  PeakWindow& operator=(const PeakWindow&) = delete;

  int64_t start_live_bytes() const { return start_live_; }
  // Highest live bytes since this window opened (so far); at least
  // start_live_bytes().
  int64_t peak_bytes() const;
  // MemoryTracker::live_mapped_bytes() at that peak (at the opening when no
  // slot was free).
  int64_t mapped_at_peak_bytes() const;

 private:
  int slot_;  // -1: no slot was free; see MemoryTracker::kMaxWindows.
  int64_t start_live_;
  int64_t start_mapped_;
};

}  // namespace trellis::ledger

#endif  // TRELLIS_LEDGER_MEMORY_TRACKER_H_
