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

int64_t MemoryTracker::live_bytes() const { return live_.live(); }
int64_t MemoryTracker::peak_bytes() const { return peak_.load(); }
int64_t MemoryTracker::allocations() const { return allocations_.load(); }
int64_t MemoryTracker::live_mapped_bytes() const { return live_mapped_.load(); }

MemoryStats MemoryTracker::Stats() const {
  const int64_t live = live_bytes();
  const int64_t peak = peak_bytes();
  return {live, live, peak, peak};
}

void MemoryTracker::RaisePeak(int64_t bytes) { PeakSlots::RaiseTo(peak_, bytes); }

int64_t MemoryTracker::ResetPeak() {
  // A concurrent allocation between the exchange and the raise still lands
  // in the new window: it raises peak_ itself after updating live_.
  const int64_t old_peak = peak_.exchange(live_.live());
  PeakSlots::RaiseTo(peak_, live_.live());
  return old_peak;
}

void MemoryTracker::Add(int64_t bytes) {
  const int64_t mapped = live_mapped_.fetch_add(MappedPart(bytes)) + MappedPart(bytes);
  PeakSlots::Raised raised = live_.Add(bytes);
  allocations_.fetch_add(1);
  PeakSlots::RaiseTo(peak_, live_.live());
  while (raised != 0) {
    window_mapped_[__builtin_ctzll(raised)].store(mapped);
    raised &= raised - 1;
  }
}

void MemoryTracker::Sub(int64_t bytes) {
  live_.Sub(bytes);
  live_mapped_.fetch_sub(MappedPart(bytes));
}

PeakWindow::PeakWindow()
    : start_live_(MemoryTracker::Get().live_bytes()),
      start_mapped_(MemoryTracker::Get().live_mapped_bytes()) {
  MemoryTracker& tracker = MemoryTracker::Get();
  // The opening is the window's first peak (a raise racing with it may be
  // paired with these mapped bytes).
  slot_ = tracker.live_.Open();
  if (slot_ >= 0) tracker.window_mapped_[slot_].store(start_mapped_);
}

PeakWindow::~PeakWindow() {
  if (slot_ >= 0) MemoryTracker::Get().live_.Close(slot_);
}

int64_t PeakWindow::peak_bytes() const {
  const MemoryTracker& tracker = MemoryTracker::Get();
  const int64_t peak = slot_ >= 0 ? tracker.live_.Peak(slot_) : tracker.peak_bytes();
  return std::max(peak, start_live_);
}

int64_t PeakWindow::mapped_at_peak_bytes() const {
  return slot_ >= 0 ? MemoryTracker::Get().window_mapped_[slot_].load() : start_mapped_;
}

}  // namespace trellis::ledger
