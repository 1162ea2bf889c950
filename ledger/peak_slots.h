#ifndef TRELLIS_LEDGER_PEAK_SLOTS_H_
#define TRELLIS_LEDGER_PEAK_SLOTS_H_

// A live byte count with peak windows that any number of threads open and
// close: each open window keeps the highest count since it opened, so
// windows compose whether they nest or overlap. The memory tracker counts
// c10's tensors with one (ledger/memory_tracker.h), the malloc hook the C
// heap with another (ledger/heap_count.h).
//
// Lock-free and constant-initialized: usable from inside malloc, before
// and after main.

#include <array>
#include <atomic>
#include <cstdint>
#include <limits>

namespace trellis::ledger {

class PeakSlots {
 public:
  // Windows that can be open at once.
  static constexpr int kMaxWindows = 64;
  using Raised = uint64_t;  // bit i: window i's peak rose

  constexpr PeakSlots() = default;

  int64_t live() const { return live_.load(std::memory_order_relaxed); }

  // Adds `bytes` to the live count; the windows whose peak that raised.
  Raised Add(int64_t bytes) {
    const int64_t live = live_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    Raised raised = 0;
    uint64_t open = open_.load(std::memory_order_relaxed);
    while (open != 0) {
      const int slot = __builtin_ctzll(open);
      if (RaiseTo(peak_[slot], live)) raised |= uint64_t{1} << slot;
      open &= open - 1;
    }
    return raised;
  }
  void Sub(int64_t bytes) { live_.fetch_sub(bytes, std::memory_order_relaxed); }

  // A new window starting at the live count, or -1 when kMaxWindows are
  // open. Best effort under races: an allocation in flight at the instant
  // of opening may or may not be counted in it.
  int Open() {
    uint64_t open = open_.load();
    for (;;) {
      if (open == ~uint64_t{0}) return -1;
      const int slot = __builtin_ctzll(~open);
      if (open_.compare_exchange_weak(open, open | (uint64_t{1} << slot))) {
        RaiseTo(peak_[slot], live());
        return slot;
      }
    }
  }
  int64_t Peak(int slot) const { return peak_[slot].load(); }
  void Close(int slot) {
    peak_[slot].store(std::numeric_limits<int64_t>::min());
    open_.fetch_and(~(uint64_t{1} << slot));
  }

  // Raises `target` to at least `value`; whether it was below.
  static bool RaiseTo(std::atomic<int64_t>& target, int64_t value) {
    int64_t seen = target.load(std::memory_order_relaxed);
    while (seen < value) {
      if (target.compare_exchange_weak(seen, value, std::memory_order_relaxed)) return true;
    }
    return false;
  }

 private:
  std::atomic<int64_t> live_{0};
  std::atomic<uint64_t> open_{0};
  // A closed slot's peak is at its minimum (never opened: 0, at most the
  // live count), so opening raises it to the live count.
  std::array<std::atomic<int64_t>, kMaxWindows> peak_{};
};

}  // namespace trellis::ledger

#endif  // TRELLIS_LEDGER_PEAK_SLOTS_H_
