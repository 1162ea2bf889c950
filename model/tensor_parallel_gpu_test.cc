// A tensor-parallel group of 2 ranks on a CUDA device, and one of 2 ranks
// on 2 devices summing with NCCL, compute what one Transformer computes on
// one device (model/testing/tensor_parallel_check.h): logits and log-probs
// within 1e-4 (cuBLAS sums in other orders than the CPU), the same greedy
// tokens, the same keys and values in the KV cache. Skips, saying why,
// where the devices are not visible.
#include <torch/cuda.h>
#include <torch/torch.h>

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "model/tensor_parallel.h"
#include "model/testing/tensor_parallel_check.h"
#include "model/transformer.h"

namespace trellis::model {
namespace {

TEST(TensorParallelGpuTest, TwoRanksOnCudaComputeWhatOneTransformerDoes) {
  if (!torch::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device visible: torch::cuda::is_available() is false";
  }
  torch::manual_seed(3);
  Transformer whole(testing::DefaultShape(), 40);
  whole->to(torch::Device(torch::kCUDA, 0));
  std::unique_ptr<TensorParallelModel> group = testing::SplitOf(whole, 2);
  ASSERT_NE(group, nullptr);
  EXPECT_TRUE(group->rank(1).NamedWeights().front().second.is_cuda());
  testing::ExpectSameAsWhole(whole, *group, 40, 1e-4);
}

TEST(TensorParallelGpuTest, TwoRanksOnTwoDevicesSumWithNcclAndComputeWhatOneTransformerDoes) {
  const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
  if (count < 2) {
    GTEST_SKIP() << "needs 2 CUDA devices (one per rank), found " << std::to_string(count);
  }
  torch::manual_seed(3);
  Transformer whole(testing::DefaultShape(), 40);
  whole->to(torch::Device(torch::kCUDA, 0));
  std::unique_ptr<TensorParallelModel> group = testing::SplitOf(whole, 2);
  ASSERT_NE(group, nullptr);
  const torch::Device second(torch::kCUDA, 1);
  const absl::Status placed = group->PlaceRanks({torch::Device(torch::kCUDA, 0), second});
  ASSERT_TRUE(placed.ok()) << placed;
  EXPECT_EQ(group->all_reduce(), "nccl");
  EXPECT_EQ(group->rank(1).NamedWeights().front().second.device(), second);
  testing::ExpectSameAsWhole(whole, *group, 40, 1e-4);
  // A forward every rank fails (a cache too small) drops the communicators;
  // the next one connects anew and computes.
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = torch::ones({1, 4}, torch::kLong);
  const torch::Tensor positions = torch::arange(4, torch::kLong).unsqueeze(0);
  KVCache small = group->NewCache(1, 2);
  EXPECT_THROW(group->forward(tokens, positions, {}, &small), c10::Error);
  const torch::Tensor expected = whole->forward(tokens, positions);
  EXPECT_LT(testing::MaxDiff(group->forward(tokens, positions), expected), 1e-4);
}

}  // namespace
}  // namespace trellis::model
