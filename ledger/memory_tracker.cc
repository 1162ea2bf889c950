#include "ledger/memory_tracker.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/alignment.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>

namespace trellis::ledger {
namespace {

// Every tracked block starts with this header, kPrefixBytes before the data
// handed to LibTorch. Keeping the size and the inner allocator's deleter in
// the block itself makes the data pointer its own context, so raw_deleter()
// works (Allocator::raw_allocate needs it) and no side table is needed.
struct Prefix {
  void* inner_context;
  c10::DeleterFnPtr inner_deleter;
  int64_t nbytes;
};
// The inner allocator aligns to gAlignment; so does the data after the prefix.
constexpr size_t kPrefixBytes = c10::gAlignment;
static_assert(sizeof(Prefix) <= kPrefixBytes, "prefix must fit the padding");

// Raises `target` to at least `value`; whether it was below.
bool RaiseTo(std::atomic<int64_t>& target, int64_t value) {
  int64_t seen = target.load();
  while (seen < value) {
    if (target.compare_exchange_weak(seen, value)) return true;
  }
  return false;
}

int64_t MappedPart(int64_t bytes) {
  return bytes >= MemoryTracker::kMappedFloor ? bytes : 0;
}

std::atomic<bool> g_installed{false};

}  // namespace

// Sits in front of the CPU allocator that was current at Install() and
// counts what passes through it.
class TrackingAllocator final : public c10::Allocator {
 public:
  explicit TrackingAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(size_t n) override {
    // Empty storages stay with the inner allocator: nothing to count, and
    // our deleter accepts the null pointer raw_deallocate may pass.
    if (n == 0) return inner_->allocate(0);
    c10::DataPtr block = inner_->allocate(n + kPrefixBytes);
    auto* base = static_cast<char*>(block.get());
    auto* prefix = reinterpret_cast<Prefix*>(base);
    prefix->inner_context = block.get_context();
    prefix->inner_deleter = block.get_deleter();
    prefix->nbytes = static_cast<int64_t>(n);
    const c10::Device device = block.device();
    block.release_context();  // Now owned by the prefix.
    MemoryTracker::Get().Add(static_cast<int64_t>(n));
    void* data = base + kPrefixBytes;
    return {data, data, &Delete, device};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &Delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

 private:
  static void Delete(void* data) {
    if (data == nullptr) return;
    const Prefix prefix =
        *reinterpret_cast<Prefix*>(static_cast<char*>(data) - kPrefixBytes);
    MemoryTracker::Get().Sub(prefix.nbytes);
    prefix.inner_deleter(prefix.inner_context);
  }

  c10::Allocator* inner_;
};

MemoryTracker& MemoryTracker::Get() {
  static MemoryTracker* tracker = new MemoryTracker();  // Never destroyed.
  return *tracker;
}

void MemoryTracker::Install() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Wrap whatever allocator is current (normally c10's default), and take
    // the highest priority so that a later default registration cannot
    // silently bypass the count. c10 takes ownership; it lives forever.
    c10::Allocator* inner = c10::GetCPUAllocator();
    auto* tracking = new TrackingAllocator(inner);
    c10::SetCPUAllocator(tracking, std::numeric_limits<uint8_t>::max());
    g_installed.store(c10::GetCPUAllocator() == tracking);
  });
}

bool MemoryTracker::installed() { return g_installed.load(); }

int64_t MemoryTracker::live_bytes() const { return live_.load(); }
int64_t MemoryTracker::peak_bytes() const { return peak_.load(); }
int64_t MemoryTracker::allocations() const { return allocations_.load(); }
int64_t MemoryTracker::live_mapped_bytes() const { return live_mapped_.load(); }

MemoryStats MemoryTracker::Stats() const {
  const int64_t live = live_bytes();
  const int64_t peak = peak_bytes();
  return {live, live, peak, peak};
}

void MemoryTracker::RaisePeak(int64_t bytes) { RaiseTo(peak_, bytes); }

int64_t MemoryTracker::ResetPeak() {
  // A concurrent allocation between the exchange and the raise still lands
  // in the new window: it raises peak_ itself after updating live_.
  const int64_t old_peak = peak_.exchange(live_.load());
  RaiseTo(peak_, live_.load());
  return old_peak;
}

void MemoryTracker::Add(int64_t bytes) {
  const int64_t mapped = live_mapped_.fetch_add(MappedPart(bytes)) + MappedPart(bytes);
  const int64_t live = live_.fetch_add(bytes) + bytes;
  allocations_.fetch_add(1);
  RaiseTo(peak_, live);
  uint64_t open = open_windows_.load();
  while (open != 0) {
    const int slot = __builtin_ctzll(open);
    if (RaiseTo(window_peak_[slot], live)) window_mapped_[slot].store(mapped);
    open &= open - 1;
  }
}

void MemoryTracker::Sub(int64_t bytes) {
  live_.fetch_sub(bytes);
  live_mapped_.fetch_sub(MappedPart(bytes));
}

int MemoryTracker::OpenWindow() {
  uint64_t open = open_windows_.load();
  for (;;) {
    if (open == ~uint64_t{0}) return -1;
    const int slot = __builtin_ctzll(~open);
    if (open_windows_.compare_exchange_weak(open, open | (uint64_t{1} << slot))) {
      // CloseWindow left the slot at its minimum. Best effort under races:
      // an allocation in flight at the instant of opening (or closing the
      // slot's previous window) may or may not be counted here.
      window_mapped_[slot].store(live_mapped_.load());
      RaiseTo(window_peak_[slot], live_.load());
      return slot;
    }
  }
}

int64_t MemoryTracker::WindowPeak(int slot) const {
  return window_peak_[slot].load();
}

int64_t MemoryTracker::WindowMappedAtPeak(int slot) const {
  return window_mapped_[slot].load();
}

void MemoryTracker::CloseWindow(int slot) {
  window_peak_[slot].store(std::numeric_limits<int64_t>::min());
  open_windows_.fetch_and(~(uint64_t{1} << slot));
}

PeakWindow::PeakWindow()
    : slot_(MemoryTracker::Get().OpenWindow()),
      start_live_(MemoryTracker::Get().live_bytes()),
      start_mapped_(MemoryTracker::Get().live_mapped_bytes()) {}

PeakWindow::~PeakWindow() {
  if (slot_ >= 0) MemoryTracker::Get().CloseWindow(slot_);
}

int64_t PeakWindow::peak_bytes() const {
  const MemoryTracker& tracker = MemoryTracker::Get();
  const int64_t peak =
      slot_ >= 0 ? tracker.WindowPeak(slot_) : tracker.peak_bytes();
  return std::max(peak, start_live_);
}

int64_t PeakWindow::mapped_at_peak_bytes() const {
  return slot_ >= 0 ? MemoryTracker::Get().WindowMappedAtPeak(slot_) : start_mapped_;
}

}  // namespace trellis::ledger
