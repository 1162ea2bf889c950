#ifndef TRELLIS_LEDGER_TESTING_FAKE_MEMORY_SOURCE_H_
#define TRELLIS_LEDGER_TESTING_FAKE_MEMORY_SOURCE_H_

// For tests: kMiB, and a device whose allocator the test drives, behaving as a
// caching allocator does: freed bytes stay reserved (cached) until
// EmptyCache, and an allocation beyond the cache reserves a new segment of
// `segment_bytes` multiples. Source() hands the ledger a MemorySource that
// reads it; the test keeps the device.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "ledger/memory_source.h"

namespace trellis::ledger::testing_util {

inline constexpr int64_t kMiB = 1 << 20;

class FakeDevice : public std::enable_shared_from_this<FakeDevice> {
 public:
  explicit FakeDevice(int64_t segment_bytes = 1) : segment_(segment_bytes) {}

  void Allocate(int64_t bytes) {
    absl::MutexLock lock(&mu_);
    m_.allocated_bytes += bytes;
    if (m_.allocated_bytes > m_.reserved_bytes) {
      const int64_t short_by = m_.allocated_bytes - m_.reserved_bytes;
      m_.reserved_bytes += (short_by + segment_ - 1) / segment_ * segment_;
    }
    m_.peak_allocated_bytes = std::max(m_.peak_allocated_bytes, m_.allocated_bytes);
    m_.peak_reserved_bytes = std::max(m_.peak_reserved_bytes, m_.reserved_bytes);
  }
  void Free(int64_t bytes) {
    absl::MutexLock lock(&mu_);
    m_.allocated_bytes -= bytes;
  }
  // Returns the cached bytes to the driver: reserved = allocated.
  void EmptyCache() {
    absl::MutexLock lock(&mu_);
    m_.reserved_bytes = m_.allocated_bytes;
  }
  int resets() const {
    absl::MutexLock lock(&mu_);
    return resets_;
  }

  std::unique_ptr<MemorySource> Source(std::string name = "cuda:0") {
    return std::make_unique<Reader>(shared_from_this(), std::move(name));
  }

 private:
  class Reader final : public MemorySource {
   public:
    Reader(std::shared_ptr<FakeDevice> device, std::string name)
        : device_(std::move(device)), name_(std::move(name)) {}
    std::string name() const override { return name_; }
    MemoryStats Stats() const override {
      absl::MutexLock lock(&device_->mu_);
      return device_->m_;
    }
    void ResetPeakStats() override {
      absl::MutexLock lock(&device_->mu_);
      device_->m_.peak_allocated_bytes = device_->m_.allocated_bytes;
      device_->m_.peak_reserved_bytes = device_->m_.reserved_bytes;
      device_->resets_ += 1;
    }

   private:
    const std::shared_ptr<FakeDevice> device_;
    const std::string name_;
  };

  const int64_t segment_;
  mutable absl::Mutex mu_;
  MemoryStats m_ ABSL_GUARDED_BY(mu_);
  int resets_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace trellis::ledger::testing_util

#endif  // TRELLIS_LEDGER_TESTING_FAKE_MEMORY_SOURCE_H_
