#include "weightsync/grpc_transport.h"

#include <torch/torch.h>

#include <chrono>
#include <future>

#include "gtest/gtest.h"
#include "rpc/server.h"
#include "weightsync/internal/inprocess_testing.h"
#include "weightsync/testing/transport_conformance.h"

namespace trellis::weightsync {
namespace {

using ::absl::StatusCode;
using conformance::TransportConformanceTest;
using conformance::TransportFactory;
using conformance::TransportPair;

// A sender with its own server, shut down before the sender goes.
struct Served {
  std::unique_ptr<GrpcSender> sender;
  std::unique_ptr<rpc::Server> server;
  ~Served() {
    if (server) server->Shutdown(absl::Milliseconds(200));
    server.reset();
    sender.reset();
  }
};

absl::StatusOr<std::shared_ptr<Served>> Serve(const TransportOptions& options) {
  auto served = std::make_shared<Served>();
  served->sender = NewGrpcSender(options);
  absl::StatusOr<std::unique_ptr<rpc::Server>> server =
      rpc::Server::Start("127.0.0.1:0", {served->sender->service()});
  if (!server.ok()) return server.status();
  served->server = *std::move(server);
  return served;
}

absl::StatusOr<TransportPair> MakeGrpc(const TransportOptions& options) {
  absl::StatusOr<std::shared_ptr<Served>> served = Serve(options);
  if (!served.ok()) return served.status();
  absl::StatusOr<std::unique_ptr<Transport>> receiver =
      NewGrpcReceiver((*served)->server->address(), options);
  if (!receiver.ok()) return receiver.status();
  // The pair's sender keeps the server alive; aliasing shared_ptr.
  std::shared_ptr<Transport> sender(*served, (*served)->sender.get());
  return TransportPair{sender,
                       std::shared_ptr<Transport>(*std::move(receiver))};
}

absl::Status CorruptGrpc(TransportPair& pair, int bucket) {
  return internal::CorruptBucketForTesting(*pair.sender, bucket, 17);
}

INSTANTIATE_TEST_SUITE_P(
    Grpc, TransportConformanceTest,
    ::testing::Values(TransportFactory{"grpc", MakeGrpc, CorruptGrpc}),
    conformance::TransportFactoryName);

NamedTensors Weights(float v) {
  return {{"a", torch::full({1000}, v)}, {"big", torch::full({3 << 20}, v)}};
}

NamedTensors Zeros() {
  return {{"a", torch::zeros({1000})}, {"big", torch::zeros({3 << 20})}};
}

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t)
      .count();
}

bool DeadOrLate(const absl::Status& s) {
  return s.code() == StatusCode::kDeadlineExceeded ||
         s.code() == StatusCode::kUnavailable;
}

TEST(GrpcTransportTest, ManyChunksRoundTrip) {
  absl::StatusOr<std::shared_ptr<Served>> served = Serve({});
  ASSERT_TRUE(served.ok()) << served.status();
  auto r = NewGrpcReceiver((*served)->server->address());
  ASSERT_TRUE(r.ok());
  // 12 MB in one bucket: three full chunks and a partial one.
  ASSERT_TRUE((*served)->sender->Publish(1, Weights(1.5)).ok());
  NamedTensors d = Zeros();
  absl::StatusOr<v1::WeightSyncStats> got =
      (*r)->Receive(1, d, absl::Seconds(10));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->buckets(), 1);
  EXPECT_TRUE(torch::equal(d[1].second, Weights(1.5)[1].second));
}

TEST(GrpcTransportTest, SenderNeverStartedIsDeadlineExceeded) {
  // A port nothing listens on (the server is gone after Shutdown).
  std::string address;
  {
    absl::StatusOr<std::shared_ptr<Served>> served = Serve({});
    ASSERT_TRUE(served.ok());
    address = (*served)->server->address();
  }
  auto r = NewGrpcReceiver(address);
  ASSERT_TRUE(r.ok());
  NamedTensors d = Zeros();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<v1::WeightSyncStats> got =
      (*r)->Receive(1, d, absl::Milliseconds(500));
  EXPECT_LE(SecondsSince(start), 1.5);
  EXPECT_EQ(got.status().code(), StatusCode::kDeadlineExceeded)
      << got.status();
  EXPECT_NE(got.status().message().find(">= 1"), std::string::npos);
}

TEST(GrpcTransportTest, SenderGoneMidWaitIsAnErrorByTheDeadline) {
  absl::StatusOr<std::shared_ptr<Served>> served = Serve({});
  ASSERT_TRUE(served.ok());
  auto r = NewGrpcReceiver((*served)->server->address());
  ASSERT_TRUE(r.ok());
  NamedTensors d = Zeros();
  auto waiting = std::async(std::launch::async, [&] {
    return (*r)->Receive(1, d, absl::Seconds(1));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto start = std::chrono::steady_clock::now();
  served->reset();
  absl::StatusOr<v1::WeightSyncStats> got = waiting.get();
  EXPECT_LE(SecondsSince(start), 2.0);
  EXPECT_TRUE(DeadOrLate(got.status())) << got.status();
}

TEST(GrpcTransportTest, TwoReceiversBothGetTheVersion) {
  absl::StatusOr<std::shared_ptr<Served>> served = Serve({});
  ASSERT_TRUE(served.ok());
  auto r0 = NewGrpcReceiver((*served)->server->address());
  auto r1 = NewGrpcReceiver((*served)->server->address());
  ASSERT_TRUE(r0.ok() && r1.ok());
  NamedTensors d0 = Zeros(), d1 = Zeros();
  auto f0 = std::async(std::launch::async,
                       [&] { return (*r0)->Receive(2, d0, absl::Seconds(10)); });
  auto f1 = std::async(std::launch::async,
                       [&] { return (*r1)->Receive(2, d1, absl::Seconds(10)); });
  ASSERT_TRUE((*served)->sender->Publish(2, Weights(2)).ok());
  absl::StatusOr<v1::WeightSyncStats> g0 = f0.get(), g1 = f1.get();
  ASSERT_TRUE(g0.ok()) << g0.status();
  ASSERT_TRUE(g1.ok()) << g1.status();
  EXPECT_TRUE(torch::equal(d0[1].second, Weights(2)[1].second));
  EXPECT_TRUE(torch::equal(d1[1].second, Weights(2)[1].second));
}

TEST(GrpcTransportTest, SenderKeepsServingAfterAReceiverWentAway) {
  absl::StatusOr<std::shared_ptr<Served>> served = Serve({});
  ASSERT_TRUE(served.ok());
  {
    auto gone = NewGrpcReceiver((*served)->server->address());
    ASSERT_TRUE(gone.ok());
    NamedTensors d = Zeros();
    EXPECT_EQ((*gone)->Receive(1, d, absl::Milliseconds(200)).status().code(),
              StatusCode::kDeadlineExceeded);
  }
  ASSERT_TRUE((*served)->sender->Publish(1, Weights(1)).ok());
  auto stays = NewGrpcReceiver((*served)->server->address());
  ASSERT_TRUE(stays.ok());
  NamedTensors d = Zeros();
  absl::StatusOr<v1::WeightSyncStats> got =
      (*stays)->Receive(1, d, absl::Seconds(10));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_GT(got->transfer_seconds(), 0.0);
}

}  // namespace
}  // namespace trellis::weightsync
