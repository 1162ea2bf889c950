#include <torch/torch.h>

#include "gtest/gtest.h"
#include "weightsync/internal/inprocess_testing.h"
#include "weightsync/testing/transport_conformance.h"
#include "weightsync/transport.h"

namespace trellis::weightsync {
namespace {

using conformance::TransportConformanceTest;
using conformance::TransportFactory;
using conformance::TransportPair;

absl::StatusOr<TransportPair> MakeInProcess(const TransportOptions& options) {
  std::shared_ptr<Transport> t = NewInProcessTransport(options);
  return TransportPair{t, t};
}

absl::Status CorruptInProcess(TransportPair& pair, int bucket) {
  return internal::CorruptBucketForTesting(*pair.sender, bucket, 17);
}

INSTANTIATE_TEST_SUITE_P(
    InProcess, TransportConformanceTest,
    ::testing::Values(TransportFactory{"inprocess", MakeInProcess,
                                       CorruptInProcess}),
    conformance::TransportFactoryName);

// Beyond the conformance suite: what is particular to this transport.

TEST(InProcessTransportTest, LargeTensorGetsItsOwnBucket) {
  TransportOptions options;
  options.bucket_bytes = 1024;
  auto t = NewInProcessTransport(options);
  NamedTensors src = {{"a", torch::ones({16})},        // 64 B
                      {"big", torch::ones({1024})},    // 4096 B
                      {"b", torch::ones({16})}};       // 64 B
  absl::StatusOr<v1::WeightSyncStats> stats = t->Publish(1, src);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->buckets(), 3);
  EXPECT_EQ(stats->bytes(), 64 + 4096 + 64);
}

TEST(InProcessTransportTest, SmallTensorsShareABucket) {
  auto t = NewInProcessTransport();  // 64 MiB buckets.
  NamedTensors src;
  for (int i = 0; i < 10; ++i) {
    src.emplace_back("w" + std::to_string(i), torch::ones({100}));
  }
  absl::StatusOr<v1::WeightSyncStats> stats = t->Publish(1, src);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->buckets(), 1);
  EXPECT_EQ(stats->tensors(), 10);
}

TEST(InProcessTransportTest, ReceiverCopiesAreIndependentOfThePublisher) {
  auto t = NewInProcessTransport();
  torch::Tensor w = torch::ones({4});
  ASSERT_TRUE(t->Publish(1, {{"w", w}}).ok());
  w.fill_(5);  // Published values were copied at Publish.
  torch::Tensor dst = torch::zeros({4});
  ASSERT_TRUE(t->Receive(1, {{"w", dst}}, absl::Seconds(1)).ok());
  EXPECT_TRUE(torch::equal(dst, torch::ones({4})));
}

TEST(InProcessTransportTest, ReceiveDoesNotRecordAutogradHistory) {
  auto t = NewInProcessTransport();
  ASSERT_TRUE(t->Publish(1, {{"w", torch::ones({4})}}).ok());
  torch::Tensor dst = torch::zeros({4}, torch::requires_grad());
  // A leaf that requires grad can only be written in place without grad.
  ASSERT_TRUE(t->Receive(1, {{"w", dst}}, absl::Seconds(1)).ok());
  EXPECT_TRUE(dst.requires_grad());
  EXPECT_EQ(dst.grad_fn(), nullptr);
  EXPECT_TRUE(torch::equal(dst.detach(), torch::ones({4})));
}

TEST(InProcessTransportTest, CorruptionHookNeedsAPublishedBucket) {
  auto t = NewInProcessTransport();
  EXPECT_EQ(internal::CorruptBucketForTesting(*t, 0).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(t->Publish(1, {{"w", torch::ones({4})}}).ok());
  EXPECT_EQ(internal::CorruptBucketForTesting(*t, 1).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(internal::CorruptBucketForTesting(*t, 0).ok());
}

}  // namespace
}  // namespace trellis::weightsync
