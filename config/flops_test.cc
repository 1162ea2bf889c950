#include "config/flops.h"

#include <vector>

#include "gtest/gtest.h"

namespace trellis::config {
namespace {

// The default model (d 128, 2 layers, 4 heads of 32, 2 KV heads, d_ff 384)
// over a vocabulary of 20.
v1::ModelConfig DefaultModel() { return v1::ModelConfig(); }

TEST(FlopsTest, MatmulParametersOfTheDefaultModel) {
  const ModelShape s = ShapeOf(DefaultModel(), 20);
  // Per layer: q and o 2·128·128, k and v 2·128·64, the MLP 3·128·384; the
  // LM head 20·128.
  EXPECT_EQ(MatmulParameters(s), 2 * (2 * 128 * 128 + 2 * 128 * 64 + 3 * 128 * 384) + 20 * 128);
}

// A mixture of experts counts its router and the k experts a token goes
// to: 4 experts of width 96, 2 per token, beside the same attention.
TEST(FlopsTest, MixtureOfExpertsCountsTheRouterAndTheActiveExperts) {
  v1::ModelConfig moe = DefaultModel();
  moe.set_num_experts(4);
  moe.set_experts_per_token(2);
  moe.set_expert_d_ff(96);
  const int64_t attention = 2 * 128 * 128 + 2 * 128 * 64;
  EXPECT_EQ(MatmulParameters(ShapeOf(moe, 20)),
            2 * (attention + 4 * 128 + 2 * 3 * 128 * 96) + 20 * 128);
  EXPECT_DOUBLE_EQ(ForwardFlopsPerToken(moe, 20, 10),
                   2.0 * MatmulParameters(ShapeOf(moe, 20)) + 4.0 * 2 * 10 * 128);
  // Every expert is a parameter, though a token uses two.
  EXPECT_EQ(ParameterCount(ShapeOf(moe, 20)) - ParameterCount(ShapeOf(DefaultModel(), 20)),
            2 * (4 * (128 + 3 * 128 * 96) - 3 * 128 * 384));
}

TEST(FlopsTest, PerTokenFormulas) {
  const int64_t n = MatmulParameters(ShapeOf(DefaultModel(), 20));
  EXPECT_DOUBLE_EQ(TrainFlopsPerToken(DefaultModel(), 20, 10), 6.0 * n + 12.0 * 2 * 10 * 128);
  EXPECT_DOUBLE_EQ(ForwardFlopsPerToken(DefaultModel(), 20, 10), 2.0 * n + 4.0 * 2 * 10 * 128);
}

TEST(FlopsTest, BatchCountsEachSequenceAtItsOwnLength) {
  const std::vector<int64_t> lengths = {3, 7, 0};
  EXPECT_DOUBLE_EQ(TrainFlops(DefaultModel(), 20, lengths),
                   3 * TrainFlopsPerToken(DefaultModel(), 20, 3) +
                       7 * TrainFlopsPerToken(DefaultModel(), 20, 7));
  EXPECT_DOUBLE_EQ(ForwardFlops(DefaultModel(), 20, lengths),
                   3 * ForwardFlopsPerToken(DefaultModel(), 20, 3) +
                       7 * ForwardFlopsPerToken(DefaultModel(), 20, 7));
  EXPECT_DOUBLE_EQ(TrainFlops(DefaultModel(), 20, {}), 0);
}

// Counted work: a causal sequence of n positions has n (n + 1) / 2 query-key
// pairs, and costs what ForwardFlopsPerToken gives its tokens at their
// average context.
TEST(FlopsTest, CountedWorkPricesPositionsAndAttentionPairs) {
  const double per_position = ForwardFlopsPerToken(DefaultModel(), 20, 0);
  const double per_pair = ForwardFlopsPerToken(DefaultModel(), 20, 1) - per_position;
  EXPECT_DOUBLE_EQ(ForwardFlopsOfWork(DefaultModel(), 20, 4, 10), 4 * per_position + 10 * per_pair);
  EXPECT_DOUBLE_EQ(ForwardFlopsOfWork(DefaultModel(), 20, 0, 0), 0);
}

}  // namespace
}  // namespace trellis::config
