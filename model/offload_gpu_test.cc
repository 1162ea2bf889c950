// HostOffload on a CUDA device: the caching allocator's allocated bytes
// fall by exactly the bytes moved out, the host copies are pinned, and
// MoveIn puts the same values back on the same device.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <iostream>

#include "gtest/gtest.h"
#include "model/offload.h"

namespace trellis::model {
namespace {

int64_t AllocatedBytes() {
  using c10::CachingAllocator::StatType;
  return c10::cuda::CUDACachingAllocator::getDeviceStats(0)
      .allocated_bytes[static_cast<size_t>(StatType::AGGREGATE)]
      .current;
}

TEST(HostOffloadGpuTest, MoveOutFreesDeviceMemoryIntoPinnedHostMemory) {
  if (!torch::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device visible: torch::cuda::is_available() is false";
  }
  const torch::Device cuda(torch::kCUDA, 0);
  torch::manual_seed(7);
  const torch::Tensor a = torch::randn({1024, 1024}, cuda);  // 4 MiB
  const torch::Tensor b = torch::randn({3, 1000}, torch::TensorOptions().device(cuda));
  const torch::Tensor a_before = a.cpu(), b_before = b.cpu();
  const int64_t bytes = a.nbytes() + b.nbytes();
  torch::cuda::synchronize();
  const int64_t allocated = AllocatedBytes();

  HostOffload offload;
  const MoveResult out = offload.MoveOut({a, b});
  EXPECT_EQ(out.bytes, bytes);
  EXPECT_EQ(allocated - AllocatedBytes(), bytes);
  EXPECT_TRUE(a.device().is_cpu());
  EXPECT_TRUE(a.is_pinned());
  EXPECT_TRUE(b.is_pinned());
  EXPECT_TRUE(torch::equal(a, a_before));

  const MoveResult in = offload.MoveIn();
  EXPECT_EQ(in.bytes, bytes);
  EXPECT_EQ(AllocatedBytes(), allocated);
  EXPECT_EQ(a.device(), cuda);
  EXPECT_TRUE(torch::equal(a.cpu(), a_before));
  EXPECT_TRUE(torch::equal(b.cpu(), b_before));
  std::cout << "moved " << bytes << " bytes: out " << out.seconds << " s ("
            << bytes / out.seconds / 1e9 << " GB/s), in " << in.seconds << " s ("
            << bytes / in.seconds / 1e9 << " GB/s)\n";
}

}  // namespace
}  // namespace trellis::model
