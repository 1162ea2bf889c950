// A tensor-parallel group (model/tensor_parallel.h) computes what one
// Transformer computes: on the default job's shape (d_model 128, 4 query
// heads over 2 key/value heads, d_ff 384), with LoRA adapters, and on the
// grouped-query Hugging Face fixture qwen2 (query/key/value biases, tied
// embedding); with and without a KV cache split by heads. Bad input is a
// status naming the tensor; a failing rank fails the call, not the process.

#include "model/tensor_parallel.h"

#include <torch/torch.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "model/internal/tensor_parallel_reduce.h"
#include "model/testing/hf_fixtures.h"
#include "model/testing/tensor_parallel_check.h"
#include "model/transformer.h"

namespace trellis::model {
namespace {

constexpr int64_t kVocab = 40;
constexpr double kTolerance = 1e-5;

using testing::DefaultShape;
using testing::ExpectSameAsWhole;
using testing::MakePrompts;
using testing::Prompts;
using testing::SplitOf;

TEST(TensorParallelTest, TwoRanksComputeTheDefaultShape) {
  torch::manual_seed(3);
  Transformer whole(DefaultShape(), kVocab);
  std::unique_ptr<TensorParallelModel> group = SplitOf(whole, 2);
  ASSERT_NE(group, nullptr);
  EXPECT_EQ(group->k(), 2);
  EXPECT_EQ(group->config().n_heads(), 4);
  // Each rank holds half the heads and MLP columns, the rest whole.
  const TransformerImpl& rank = group->rank(1);
  EXPECT_EQ(rank.config().n_heads(), 2);
  EXPECT_EQ(rank.config().n_kv_heads(), 1);
  EXPECT_EQ(rank.config().d_ff(), 192);
  ExpectSameAsWhole(whole, *group, kVocab, kTolerance);
}

TEST(TensorParallelTest, LoraHalvesSplitWithTheirProjections) {
  v1::LoraConfig lora;
  lora.set_rank(4);
  lora.set_alpha(8);
  for (auto p : {v1::LoraConfig::Q_PROJ, v1::LoraConfig::K_PROJ, v1::LoraConfig::V_PROJ,
                 v1::LoraConfig::O_PROJ, v1::LoraConfig::GATE_PROJ, v1::LoraConfig::UP_PROJ,
                 v1::LoraConfig::DOWN_PROJ}) {
    lora.add_target_modules(p);
  }
  torch::manual_seed(4);
  Transformer whole(DefaultShape(), kVocab, Head::kLanguageModel, lora);
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, tensor] : whole->AdapterWeights()) tensor.normal_(0, 0.1);
  }
  std::unique_ptr<TensorParallelModel> group = SplitOf(whole, 2, lora);
  ASSERT_NE(group, nullptr);
  ExpectSameAsWhole(whole, *group, kVocab, kTolerance);
}

TEST(TensorParallelTest, TwoRanksComputeTheQwen2Fixture) {
  Transformer whole = testing::LoadHfTransformer(testing::FixtureDir("qwen2"));
  ASSERT_FALSE(whole.is_empty());
  ASSERT_EQ(whole->config().n_heads(), 4);
  ASSERT_EQ(whole->config().n_kv_heads(), 2);
  std::unique_ptr<TensorParallelModel> group = SplitOf(whole, 2);
  ASSERT_NE(group, nullptr);
  ExpectSameAsWhole(whole, *group, whole->vocab_size(), kTolerance);
}

TEST(TensorParallelTest, RankSlicesLoadAsTheWholeTensorsDo) {
  torch::manual_seed(5);
  Transformer whole(DefaultShape(), kVocab);
  std::unique_ptr<TensorParallelModel> from_whole = SplitOf(whole, 2);
  absl::StatusOr<std::unique_ptr<TensorParallelModel>> from_slices =
      TensorParallelModel::Create(DefaultShape(), kVocab, 2);
  ASSERT_TRUE(from_slices.ok()) << from_slices.status();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE((*from_slices)->LoadRankWeights(r, from_whole->rank(r).NamedWeights()).ok());
  }
  torch::NoGradGuard no_grad;
  const Prompts p = MakePrompts(kVocab);
  EXPECT_TRUE(torch::equal(from_whole->forward(p.tokens, p.positions, p.key_valid),
                           (*from_slices)->forward(p.tokens, p.positions, p.key_valid)));
}

TEST(TensorParallelTest, BadShapesAndNamesAreStatuses) {
  for (int k : {0, 3, 65}) {
    absl::StatusOr<std::unique_ptr<TensorParallelModel>> group =
        TensorParallelModel::Create(DefaultShape(), kVocab, k);
    EXPECT_EQ(group.status().code(), absl::StatusCode::kInvalidArgument) << k;
  }
  EXPECT_NE(TensorParallelModel::Create(DefaultShape(), kVocab, 4)
                .status()
                .message()
                .find("n_kv_heads (2)"),
            std::string::npos);
  absl::StatusOr<std::unique_ptr<TensorParallelModel>> group =
      TensorParallelModel::Create(DefaultShape(), kVocab, 2);
  ASSERT_TRUE(group.ok());
  const std::string q = "model.layers.0.self_attn.q_proj.weight";
  absl::Status unknown =
      (*group)->LoadWeights({{"model.layers.9.mlp.up_proj.weight", torch::zeros({384, 128})}});
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.message().find("model.layers.9.mlp.up_proj.weight"), std::string::npos);
  absl::Status odd = (*group)->LoadWeights({{q, torch::zeros({127, 128})}});
  EXPECT_NE(odd.message().find(q), std::string::npos) << odd;
  absl::Status wrong = (*group)->LoadRankWeights(1, {{q, torch::zeros({128, 128})}});
  EXPECT_NE(wrong.message().find("rank 1 of 2: " + q), std::string::npos) << wrong;
  EXPECT_EQ((*group)->LoadRankWeights(2, {}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorParallelTest, AFailingRankFailsTheCallNotTheProcess) {
  absl::StatusOr<std::unique_ptr<TensorParallelModel>> group =
      TensorParallelModel::Create(DefaultShape(), kVocab, 2);
  ASSERT_TRUE(group.ok());
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = torch::ones({1, 4}, torch::kLong);
  // Positions of the wrong shape: every rank throws before its first
  // all-reduce.
  EXPECT_THROW((*group)->forward(tokens, torch::zeros({1, 3}, torch::kLong)), c10::Error);
  // A cache too small: likewise, and the group still computes afterwards.
  KVCache small = (*group)->NewCache(1, 2);
  EXPECT_THROW((*group)->forward(tokens, torch::zeros({1, 4}, torch::kLong), {}, &small),
               c10::Error);
  EXPECT_EQ((*group)->forward(tokens, torch::zeros({1, 4}, torch::kLong)).size(2), kVocab);
}

TEST(TensorParallelTest, RanksPlacedOnOneDeviceSumInMemory) {
  torch::manual_seed(3);
  Transformer whole(DefaultShape(), kVocab);
  std::unique_ptr<TensorParallelModel> group = SplitOf(whole, 2);
  ASSERT_NE(group, nullptr);
  EXPECT_EQ(group->all_reduce(), "in-memory");
  ASSERT_TRUE(group->PlaceRanks({torch::kCPU, torch::kCPU}).ok());
  EXPECT_EQ(group->all_reduce(), "in-memory");
  ExpectSameAsWhole(whole, *group, kVocab, kTolerance);
}

TEST(TensorParallelTest, PlacementThatCannotBeServedMovesNothing) {
  absl::StatusOr<std::unique_ptr<TensorParallelModel>> group =
      TensorParallelModel::Create(DefaultShape(), kVocab, 2);
  ASSERT_TRUE(group.ok());
  absl::Status s = (*group)->PlaceRanks({torch::kCPU});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("1 devices for 2 ranks"), std::string::npos) << s;
  // No machine has these devices; a build without NCCL says it has none.
  s = (*group)->PlaceRanks({torch::Device(torch::kCUDA, 98), torch::Device(torch::kCUDA, 99)});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ((*group)->all_reduce(), "in-memory");
  EXPECT_TRUE((*group)->rank(1).NamedWeights().front().second.device().is_cpu());
}

TEST(TensorParallelTest, AnAbortedAllReduceWakesTheRanksWaitingInIt) {
  internal::InMemoryAllReduce reduce(2);
  bool threw = false;
  {
    std::jthread waiting([&] {
      try {
        reduce.Sum(0, torch::ones({2}));
      } catch (const c10::Error&) {
        threw = true;
      }
    });
    reduce.Abort();
  }
  EXPECT_TRUE(threw);
}

TEST(TensorParallelTest, TheAllReduceSumsInRankOrder) {
  internal::InMemoryAllReduce reduce(3);
  std::vector<torch::Tensor> sums(3);
  {
    std::vector<std::jthread> ranks;
    for (int r = 0; r < 3; ++r) {
      ranks.emplace_back([&, r] {
        for (int round = 0; round < 4; ++round) {
          sums[r] = reduce.Sum(r, torch::full({2}, static_cast<float>(r + 10 * round)));
        }
      });
    }
  }
  for (const torch::Tensor& s : sums) EXPECT_TRUE(torch::equal(s, torch::full({2}, 93.0f)));
}

}  // namespace
}  // namespace trellis::model
