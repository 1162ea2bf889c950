#include "model/threads.h"

#include "gtest/gtest.h"
#include "model/matmul_rate.h"

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

}  // namespace
}  // namespace trellis::model
