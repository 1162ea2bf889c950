#include "weightsync/internal/bucket_set.h"

#include <ATen/ATen.h>

#include <vector>

#include "gtest/gtest.h"
#include "weightsync/internal/checksum.h"

namespace trellis::weightsync::internal {
namespace {

BucketSet Packed(const NamedTensors& tensors) {
  absl::StatusOr<BucketSet> set = PlanBuckets(tensors, int64_t{1} << 20);
  EXPECT_TRUE(set.ok()) << set.status();
  PackSeconds seconds;
  for (size_t i = 0; i < set->buckets.size(); ++i) {
    EXPECT_TRUE(PackBucket(*set, tensors, i, &seconds).ok());
  }
  return *std::move(set);
}

// A matrix whose rows are contiguous but apart (the resharding sync's row
// pieces) is packed row by row: the bucket holds its values in order, and
// its checksum covers them.
TEST(BucketSetTest, PacksAStridedMatrixRowByRow) {
  const at::Tensor base = at::arange(48, at::kFloat);
  const at::Tensor rows = base.as_strided({3, 4}, {16, 1}, 2);
  ASSERT_FALSE(rows.is_contiguous());
  const BucketSet set = Packed({{"rows", rows}});
  ASSERT_EQ(set.buckets.size(), 1u);
  const at::Tensor got = set.buckets[0].narrow(0, 0, 48).view(at::kFloat).view({3, 4});
  EXPECT_TRUE(at::equal(got, rows.contiguous()));
  EXPECT_EQ(set.checksums[0], Checksum64(set.buckets[0].data_ptr(), set.buckets[0].numel()));
}

// A view spanning all of another tensor's storage is copied into (the
// tensor it views sees the values); a tensor that owns its storage alone
// still takes the bucket's memory.
TEST(BucketSetTest, LoadIntoAdoptsOnlyStorageNoOtherTensorShares) {
  const BucketSet set = Packed({{"w", at::arange(4, at::kFloat).view({2, 2})}});
  const at::Tensor owner = at::zeros({4});
  ASSERT_TRUE(LoadInto(set, {{"w", owner.view({2, 2})}}, &set.buckets).ok());
  EXPECT_TRUE(at::equal(owner, at::arange(4, at::kFloat)));
  const at::Tensor alone = at::zeros({2, 2});
  ASSERT_TRUE(LoadInto(set, {{"w", alone}}, &set.buckets).ok());
  EXPECT_EQ(alone.data_ptr(), set.buckets[0].data_ptr());
  EXPECT_TRUE(at::equal(alone.view({4}), at::arange(4, at::kFloat)));
}

// A receiver that copies its versions out reuses the last version's free
// buckets for the next: the pool then holds each of them once, so that
// they are free again for the version after.
TEST(BucketSetTest, SparePoolHoldsABucketReusedForTheNewestOnce) {
  SparePool pool;
  std::vector<at::Tensor> first = AllocateBuckets({64, 128}, pool.buckets());
  pool.Remember(first);
  first.clear();
  for (int version = 2; version <= 4; ++version) {
    std::vector<at::Tensor> next = AllocateBuckets({64, 128}, pool.buckets());
    ASSERT_EQ(next.size(), 2u);
    EXPECT_TRUE(next[0].is_same(pool.buckets()->at(0))) << "version " << version;
    EXPECT_TRUE(next[1].is_same(pool.buckets()->at(1))) << "version " << version;
    pool.Remember(next);
    EXPECT_EQ(pool.buckets()->size(), 2u);
  }
}

}  // namespace
}  // namespace trellis::weightsync::internal
