// CMake compiles this file only with TRELLIS_CUDA (cuda_memory_none.cc
// otherwise).
#include "ledger/cuda_memory.h"

#include <ATen/Context.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace trellis::ledger {
namespace {

constexpr auto kAggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);

class CudaCachingAllocatorMemory final : public MemorySource {
 public:
  explicit CudaCachingAllocatorMemory(c10::DeviceIndex index) : index_(index) {}

  std::string name() const override { return absl::StrCat("cuda:", index_); }

  MemoryStats Stats() const override {
    const c10::CachingDeviceAllocator::DeviceStats stats =
        c10::cuda::CUDACachingAllocator::getDeviceStats(index_);
    const c10::CachingAllocator::Stat& allocated = stats.allocated_bytes[kAggregate];
    const c10::CachingAllocator::Stat& reserved = stats.reserved_bytes[kAggregate];
    return {allocated.current, reserved.current, allocated.peak, reserved.peak};
  }

  void ResetPeakStats() override { c10::cuda::CUDACachingAllocator::resetPeakStats(index_); }

 private:
  const c10::DeviceIndex index_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MemorySource>> CudaMemory(int index) {
  const int count = c10::cuda::device_count();
  if (count == 0) {
    return absl::FailedPreconditionError(
        "device memory: no CUDA device visible (c10::cuda::device_count() is 0)");
  }
  if (index < 0 || index >= count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device memory: cuda:", index, " is not one of the ", count, " visible CUDA devices"));
  }
  try {
    // The caching allocator keeps no stats before CUDA's lazy initialization.
    at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
    auto source =
        std::make_unique<CudaCachingAllocatorMemory>(static_cast<c10::DeviceIndex>(index));
    source->Stats();
    return source;
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("device memory: cuda:", index, ": ", e.what_without_backtrace()));
  }
}

absl::StatusOr<std::vector<std::unique_ptr<MemorySource>>> CudaMemoryOfEveryDevice() {
  std::vector<std::unique_ptr<MemorySource>> sources;
  const int count = c10::cuda::device_count();
  if (count == 0) return CudaMemory(0).status();
  for (int i = 0; i < count; ++i) {
    absl::StatusOr<std::unique_ptr<MemorySource>> source = CudaMemory(i);
    if (!source.ok()) return source.status();
    sources.push_back(*std::move(source));
  }
  return sources;
}

}  // namespace trellis::ledger
