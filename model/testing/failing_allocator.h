#ifndef TRELLIS_MODEL_TESTING_FAILING_ALLOCATOR_H_
#define TRELLIS_MODEL_TESTING_FAILING_ALLOCATOR_H_

// Fault injection at the LibTorch edge: while a FailingCpuAllocator is in
// scope, every CPU tensor allocation in the process throws
// c10::OutOfMemoryError, as LibTorch's CUDA allocator does when the device
// is full. Tensors made before it keep their own deleters.

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <limits>

namespace trellis::model::testing {

class FailingCpuAllocator final : public c10::Allocator {
 public:
  // The highest priority, as ledger::MemoryTracker takes, so that it wins
  // over that one too.
  static constexpr uint8_t kPriority = std::numeric_limits<uint8_t>::max();

  FailingCpuAllocator() : previous_(c10::GetCPUAllocator()) {
    c10::SetCPUAllocator(this, kPriority);
  }
  ~FailingCpuAllocator() override { c10::SetCPUAllocator(previous_, kPriority); }
  FailingCpuAllocator(const FailingCpuAllocator&) = delete;
  FailingCpuAllocator& operator=(const FailingCpuAllocator&) = delete;

  c10::DataPtr allocate(size_t n) override {
    TORCH_CHECK_WITH(OutOfMemoryError, n == 0, "injected out of memory: tried to allocate ", n,
                     " bytes");
    return previous_->allocate(0);
  }
  c10::DeleterFnPtr raw_deleter() const override { return previous_->raw_deleter(); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    previous_->copy_data(dest, src, count);
  }

 private:
  c10::Allocator* const previous_;
};

}  // namespace trellis::model::testing

#endif  // TRELLIS_MODEL_TESTING_FAILING_ALLOCATOR_H_
