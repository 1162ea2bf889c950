// A tensor-parallel group of 2 ranks on a CUDA device computes what one
// Transformer computes there (model/testing/tensor_parallel_check.h):
// logits and log-probs within 1e-4 (cuBLAS sums in other orders than the
// CPU), the same greedy tokens, the same keys and values in the KV cache.
// Skips, saying why, where no CUDA device is visible.
#include <torch/cuda.h>
#include <torch/torch.h>

#include <memory>

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

}  // namespace
}  // namespace trellis::model
