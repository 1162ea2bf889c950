#include "model/threads.h"

#include "gtest/gtest.h"
#include "model/matmul_rate.h"
#include "model/thread_probe.h"
#include "torch/torch.h"

namespace trellis::model {
namespace {

// One count sizes every pool: LibTorch's intra-op pool and OpenBLAS's
// threads follow each call; the inter-op pool keeps its first size.
TEST(ThreadsTest, SetThreadsSizesEveryPool) {
  const ThreadCounts two = SetThreads(2);
  EXPECT_EQ(two.intra_op, 2);
  EXPECT_GE(two.inter_op, 1);
  // 0 where the loaded BLAS is not OpenBLAS; 1 for a pthreads OpenBLAS
  // (Debian's), whose products then run on the OpenMP pool's calling thread.
  EXPECT_TRUE(two.blas == BlasThreadsFor(2) || two.blas == 0) << two.blas;
  const ThreadCounts one = SetThreads(1);
  EXPECT_EQ(one.intra_op, 1);
  EXPECT_EQ(one.inter_op, two.inter_op);
  EXPECT_TRUE(one.blas == 1 || one.blas == 0) << one.blas;
  const ThreadCounts now = CurrentThreads();
  EXPECT_EQ(now.intra_op, 1);
  EXPECT_EQ(now.blas, one.blas);
}

TEST(ThreadsTest, PthreadsOpenBlasGetsOneThreadBesideTheOpenMpPool) {
  EXPECT_EQ(BlasThreadsFor(1), 1);
  const int blas = BlasThreadsFor(4);
  EXPECT_TRUE(blas == 1 || blas == 4) << blas;
}

TEST(MatmulRateTest, PeakIsAPositiveRate) {
  SetThreads(1);
  EXPECT_GT(MeasureMatmulPeak(), 0);
  EXPECT_GT(MeasureMatmulRate(8, 16, 4), 0);
}

// The fewest threads within the margin of the fastest: more threads are
// kept only when they are more than the margin faster.
TEST(ThreadProbeTest, KeepsTheFewestThreadsWithinTheMargin) {
  EXPECT_EQ(FewestThreadsWithin({{1, 1.00}, {2, 1.34}}, 0.05), 1);
  EXPECT_EQ(FewestThreadsWithin({{1, 1.00}, {2, 0.97}}, 0.05), 1);
  EXPECT_EQ(FewestThreadsWithin({{1, 1.00}, {2, 0.60}, {4, 0.58}}, 0.05), 2);
  EXPECT_EQ(FewestThreadsWithin({{1, 1.00}, {2, 0.60}, {4, 0.40}}, 0.05), 4);
}

// The probe times every halving of the count down to 1, leaves the pool at
// the count it picked, and draws nothing from the run's generator.
TEST(ThreadProbeTest, ProbeSetsThePoolAndLeavesTheRunsDrawsAlone) {
  v1::ModelConfig config;
  config.set_d_model(32);
  config.set_n_layers(1);
  config.set_n_heads(2);
  config.set_d_ff(64);
  config.set_vocab_size(16);
  config.set_max_seq_len(16);
  torch::manual_seed(7);
  const torch::Tensor expected = torch::rand({4});
  torch::manual_seed(7);
  const ThreadProbe probe = ProbeIntraOpThreads(config, 4);
  EXPECT_TRUE(torch::equal(torch::rand({4}), expected));
  ASSERT_EQ(probe.seconds.size(), 3u);
  EXPECT_EQ(probe.seconds.begin()->first, 1);
  EXPECT_EQ(probe.seconds.rbegin()->first, 4);
  EXPECT_EQ(probe.intra_op, FewestThreadsWithin(probe.seconds, kProbeMargin));
  EXPECT_EQ(CurrentThreads().intra_op, probe.intra_op);
  const ThreadProbe one = ProbeIntraOpThreads(config, 1);
  EXPECT_EQ(one.intra_op, 1);
  EXPECT_TRUE(one.seconds.empty());
  SetThreads(1);
}

}  // namespace
}  // namespace trellis::model
