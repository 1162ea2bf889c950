#include "weightsync/gloo_transport.h"

#include <torch/torch.h>

#include <chrono>
#include <future>
#include <thread>

#include "gtest/gtest.h"
#include "weightsync/internal/inprocess_testing.h"
#include "weightsync/testing/transport_conformance.h"

namespace trellis::weightsync {
namespace {

using ::absl::StatusCode;
using conformance::TransportConformanceTest;
using conformance::TransportFactory;
using conformance::TransportPair;

GlooEndpoint FreshEndpoint(int num_receivers = 1) {
  absl::StatusOr<int> port = PickFreeTcpPort("127.0.0.1");
  EXPECT_TRUE(port.ok()) << port.status();
  GlooEndpoint ep;
  ep.host = "127.0.0.1";
  ep.port = port.ok() ? *port : 0;
  ep.num_receivers = num_receivers;
  ep.connect_timeout = absl::Seconds(10);
  return ep;
}

std::unique_ptr<Transport> Receiver(GlooEndpoint ep, int index,
                                    TransportOptions options = {}) {
  ep.receiver_index = index;
  absl::StatusOr<std::unique_ptr<Transport>> r = NewGlooReceiver(ep, options);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : nullptr;
}

absl::StatusOr<TransportPair> MakeGloo(const TransportOptions& options) {
  GlooEndpoint ep = FreshEndpoint();
  absl::StatusOr<std::unique_ptr<Transport>> sender =
      NewGlooSender(ep, options);
  if (!sender.ok()) return sender.status();
  ep.receiver_index = 0;
  absl::StatusOr<std::unique_ptr<Transport>> receiver =
      NewGlooReceiver(ep, options);
  if (!receiver.ok()) return receiver.status();
  return TransportPair{std::shared_ptr<Transport>(*std::move(sender)),
                       std::shared_ptr<Transport>(*std::move(receiver))};
}

absl::Status CorruptGloo(TransportPair& pair, int bucket) {
  return internal::CorruptBucketForTesting(*pair.sender, bucket, 17);
}

INSTANTIATE_TEST_SUITE_P(
    Gloo, TransportConformanceTest,
    ::testing::Values(TransportFactory{"gloo", MakeGloo, CorruptGloo}),
    conformance::TransportFactoryName);

NamedTensors Weights(float v) {
  return {{"a", torch::full({1000}, v)}, {"b", torch::full({3, 7}, v + 1)}};
}

NamedTensors Zeros() {
  return {{"a", torch::zeros({1000})}, {"b", torch::zeros({3, 7})}};
}

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t)
      .count();
}

TEST(GlooTransportTest, SenderNeverStartedIsAnErrorByTheDeadline) {
  GlooEndpoint ep = FreshEndpoint();
  auto receiver = Receiver(ep, 0);
  NamedTensors dst = Zeros();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<v1::WeightSyncStats> got =
      receiver->Receive(1, dst, absl::Seconds(1));
  EXPECT_LE(SecondsSince(start), 2.0);
  EXPECT_TRUE(got.status().code() == StatusCode::kDeadlineExceeded ||
              got.status().code() == StatusCode::kUnavailable)
      << got.status();
}

TEST(GlooTransportTest, SenderDestroyedIsAnErrorByTheDeadline) {
  GlooEndpoint ep = FreshEndpoint();
  auto sender = NewGlooSender(ep);
  ASSERT_TRUE(sender.ok()) << sender.status();
  auto receiver = Receiver(ep, 0);
  ASSERT_TRUE((*sender)->Publish(1, Weights(1)).ok());
  NamedTensors dst = Zeros();
  ASSERT_TRUE(receiver->Receive(1, dst, absl::Seconds(10)).ok());
  const auto destroy = std::chrono::steady_clock::now();
  sender->reset();
  EXPECT_LE(SecondsSince(destroy), 5.0);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<v1::WeightSyncStats> got =
      receiver->Receive(2, dst, absl::Seconds(1));
  EXPECT_LE(SecondsSince(start), 2.0);
  EXPECT_TRUE(got.status().code() == StatusCode::kDeadlineExceeded ||
              got.status().code() == StatusCode::kUnavailable)
      << got.status();
  EXPECT_TRUE(torch::equal(dst[0].second, Weights(1)[0].second));
}

TEST(GlooTransportTest, TwoReceiversBothGetTheVersion) {
  GlooEndpoint ep = FreshEndpoint(2);
  auto sender = NewGlooSender(ep);
  ASSERT_TRUE(sender.ok()) << sender.status();
  auto r0 = Receiver(ep, 0);
  auto r1 = Receiver(ep, 1);
  ASSERT_TRUE((*sender)->Publish(3, Weights(3)).ok());
  NamedTensors d0 = Zeros(), d1 = Zeros();
  auto f0 = std::async(std::launch::async,
                       [&] { return r0->Receive(3, d0, absl::Seconds(10)); });
  auto f1 = std::async(std::launch::async,
                       [&] { return r1->Receive(3, d1, absl::Seconds(10)); });
  absl::StatusOr<v1::WeightSyncStats> g0 = f0.get(), g1 = f1.get();
  ASSERT_TRUE(g0.ok()) << g0.status();
  ASSERT_TRUE(g1.ok()) << g1.status();
  EXPECT_EQ(g0->version(), 3);
  EXPECT_EQ(g1->version(), 3);
  for (const NamedTensors* d : {&d0, &d1}) {
    EXPECT_TRUE(torch::equal((*d)[0].second, Weights(3)[0].second));
    EXPECT_TRUE(torch::equal((*d)[1].second, Weights(3)[1].second));
  }
}

TEST(GlooTransportTest, SenderKeepsServingAfterAReceiverWentAway) {
  GlooEndpoint ep = FreshEndpoint(2);
  auto sender = NewGlooSender(ep);
  ASSERT_TRUE(sender.ok()) << sender.status();
  auto gone = Receiver(ep, 0);
  auto stays = Receiver(ep, 1);
  ASSERT_TRUE((*sender)->Publish(1, Weights(1)).ok());
  NamedTensors d = Zeros();
  ASSERT_TRUE(gone->Receive(1, d, absl::Seconds(10)).ok());
  ASSERT_TRUE(stays->Receive(1, d, absl::Seconds(10)).ok());
  // Receiver 0 leaves mid-wait: its request is pending on the sender.
  auto abandoned = std::async(std::launch::async, [&] {
    NamedTensors mine = Zeros();
    return gone->Receive(5, mine, absl::Milliseconds(300));
  });
  EXPECT_EQ(abandoned.get().status().code(), StatusCode::kDeadlineExceeded);
  gone.reset();
  ASSERT_TRUE((*sender)->Publish(2, Weights(2)).ok());
  absl::StatusOr<v1::WeightSyncStats> got =
      stays->Receive(2, d, absl::Seconds(10));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->version(), 2);
  // A receiver that comes back into slot 0 is served again.
  auto back = Receiver(ep, 0);
  NamedTensors d0 = Zeros();
  got = back->Receive(2, d0, absl::Seconds(10));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(torch::equal(d0[0].second, Weights(2)[0].second));
}

TEST(GlooTransportTest, TimedOutReceiveLeavesThePairUsable) {
  // A receive that timed out waiting leaves the pair usable; the next one
  // still gets the version.
  GlooEndpoint ep = FreshEndpoint();
  auto sender = NewGlooSender(ep);
  ASSERT_TRUE(sender.ok()) << sender.status();
  auto r = Receiver(ep, 0);
  NamedTensors d = Zeros();
  EXPECT_EQ(r->Receive(1, d, absl::Milliseconds(100)).status().code(),
            StatusCode::kDeadlineExceeded);
  ASSERT_TRUE((*sender)->Publish(1, Weights(1)).ok());
  absl::StatusOr<v1::WeightSyncStats> got = r->Receive(1, d, absl::Seconds(10));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_GT(got->transfer_seconds(), 0.0);
  EXPECT_GE(got->load_seconds(), 0.0);
  EXPECT_EQ(got->bytes(), (1000 + 21) * 4);
}

TEST(GlooTransportTest, BadEndpointsAreInvalidArgument) {
  GlooEndpoint ep;
  ep.port = 0;
  EXPECT_EQ(NewGlooSender(ep).status().code(), StatusCode::kInvalidArgument);
  ep.port = 5000;
  ep.receiver_index = 1;
  EXPECT_EQ(NewGlooReceiver(ep).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(NewGlooSender(ep).status().code(), StatusCode::kInvalidArgument);
}

TEST(GlooTransportTest, EndsAreOneWay) {
  GlooEndpoint ep = FreshEndpoint();
  auto sender = NewGlooSender(ep);
  ASSERT_TRUE(sender.ok());
  NamedTensors d = Zeros();
  EXPECT_EQ((*sender)->Receive(1, d, absl::Seconds(1)).status().code(),
            StatusCode::kUnimplemented);
  auto r = Receiver(ep, 0);
  EXPECT_EQ(r->Publish(1, d).status().code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace trellis::weightsync
