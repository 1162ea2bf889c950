#include "weightsync/inprocess_transport.h"

#include <torch/torch.h>

#include "gtest/gtest.h"
#include "weightsync/internal/inprocess_testing.h"
#include "weightsync/registry.h"
#include "weightsync/testing/transport_conformance.h"

namespace trellis::weightsync {
namespace {

using conformance::TransportConformanceTest;
using conformance::TransportEnds;
using conformance::TransportFactory;

absl::StatusOr<TransportEnds> MakeInProcess(const TransportOptions& options) {
  std::shared_ptr<InProcessPublisher> publisher = NewInProcessPublisher(options);
  return TransportEnds{publisher, publisher->NewReceiver()};
}

// The same ends, made by name as the role factories make them.
absl::StatusOr<TransportEnds> MakeInProcessByName(const TransportOptions& options) {
  TransportRegistry registry;
  if (absl::Status s = RegisterBuiltinTransports(registry); !s.ok()) return s;
  return conformance::MakeByName(registry, "inprocess", options);
}

INSTANTIATE_TEST_SUITE_P(
    InProcess, TransportConformanceTest,
    ::testing::Values(TransportFactory{"inprocess", MakeInProcess, conformance::CorruptStaged},
                      TransportFactory{"inprocess_by_name", MakeInProcessByName,
                                       conformance::CorruptStaged}),
    conformance::TransportFactoryName);

// Beyond the conformance suite: what is particular to this transport.

TEST(InProcessTransportTest, LargeTensorGetsItsOwnBucket) {
  TransportOptions options;
  options.bucket_bytes = 1024;
  auto t = NewInProcessPublisher(options);
  NamedTensors src = {{"a", torch::ones({16})},      // 64 B
                      {"big", torch::ones({1024})},  // 4096 B
                      {"b", torch::ones({16})}};     // 64 B
  absl::StatusOr<v1::WeightSyncStats> stats = t->Publish(1, src);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->buckets(), 3);
  EXPECT_EQ(stats->bytes(), 64 + 4096 + 64);
}

TEST(InProcessTransportTest, SmallTensorsShareABucket) {
  auto t = NewInProcessPublisher();  // 64 MiB buckets.
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
  auto t = NewInProcessPublisher();
  torch::Tensor w = torch::ones({4});
  ASSERT_TRUE(t->Publish(1, {{"w", w}}).ok());
  w.fill_(5);  // Published values were copied at Publish.
  torch::Tensor dst = torch::zeros({4});
  ASSERT_TRUE(t->NewReceiver()->Receive(1, {{"w", dst}}, absl::Seconds(1)).ok());
  EXPECT_TRUE(torch::equal(dst, torch::ones({4})));
}

TEST(InProcessTransportTest, ReceiveDoesNotRecordAutogradHistory) {
  auto t = NewInProcessPublisher();
  ASSERT_TRUE(t->Publish(1, {{"w", torch::ones({4})}}).ok());
  torch::Tensor dst = torch::zeros({4}, torch::requires_grad());
  // A leaf that requires grad can only be written in place without grad.
  ASSERT_TRUE(t->NewReceiver()->Receive(1, {{"w", dst}}, absl::Seconds(1)).ok());
  EXPECT_TRUE(dst.requires_grad());
  EXPECT_EQ(dst.grad_fn(), nullptr);
  EXPECT_TRUE(torch::equal(dst.detach(), torch::ones({4})));
}

TEST(InProcessTransportTest, EveryReceiverGetsTheVersion) {
  auto t = NewInProcessPublisher();
  std::unique_ptr<Receiver> first = t->NewReceiver();
  std::unique_ptr<Receiver> second = t->NewReceiver();
  ASSERT_TRUE(t->Publish(1, {{"w", torch::ones({4})}}).ok());
  for (Receiver* r : {first.get(), second.get()}) {
    torch::Tensor dst = torch::zeros({4});
    ASSERT_TRUE(r->Receive(1, {{"w", dst}}, absl::Seconds(1)).ok());
    EXPECT_TRUE(torch::equal(dst, torch::ones({4})));
  }
}

TEST(InProcessTransportTest, CorruptionHookNeedsAPublishedBucket) {
  auto t = NewInProcessPublisher();
  EXPECT_EQ(internal::CorruptBucketForTesting(*t, 0).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(t->Publish(1, {{"w", torch::ones({4})}}).ok());
  EXPECT_EQ(internal::CorruptBucketForTesting(*t, 1).code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(internal::CorruptBucketForTesting(*t, 0).ok());
}

}  // namespace
}  // namespace trellis::weightsync
