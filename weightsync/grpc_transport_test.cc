#include "weightsync/grpc_transport.h"

#include <torch/torch.h>

#include <chrono>
#include <future>

#include "gtest/gtest.h"
#include "rpc/channel.h"
#include "rpc/server.h"
#include "weightsync/registry.h"
#include "weightsync/testing/transport_conformance.h"

namespace trellis::weightsync {
namespace {

using ::absl::StatusCode;
using conformance::TransportConformanceTest;
using conformance::TransportEnds;
using conformance::TransportFactory;

// A server carrying a WeightStream host, and the host's publisher; the
// server shuts down before the publisher and the host go.
struct Served {
  std::unique_ptr<WeightStreamHost> host = NewWeightStreamHost();
  std::unique_ptr<Publisher> publisher;
  std::unique_ptr<rpc::Server> server;
  TransportOptions address;  // The server's, for receivers.
  ~Served() {
    if (server) server->Shutdown(absl::Milliseconds(200));
    server.reset();
    publisher.reset();
  }
};

// The server alone; the publisher is the caller's to make.
absl::StatusOr<std::shared_ptr<Served>> StartServer() {
  auto served = std::make_shared<Served>();
  absl::StatusOr<std::unique_ptr<rpc::Server>> server =
      rpc::Server::Start("127.0.0.1:0", {served->host->service()});
  if (!server.ok()) return server.status();
  served->server = *std::move(server);
  absl::StatusOr<rpc::HostPort> address = rpc::SplitHostPort(served->server->address());
  if (!address.ok()) return address.status();
  served->address.host = address->host;
  served->address.port = address->port;
  return served;
}

absl::StatusOr<std::shared_ptr<Served>> Serve(const TransportOptions& options) {
  absl::StatusOr<std::shared_ptr<Served>> served = StartServer();
  if (!served.ok()) return served.status();
  absl::StatusOr<std::unique_ptr<Publisher>> publisher = (*served)->host->NewPublisher(options);
  if (!publisher.ok()) return publisher.status();
  (*served)->publisher = *std::move(publisher);
  return served;
}

std::unique_ptr<Receiver> ReceiverOf(const Served& served) {
  absl::StatusOr<std::unique_ptr<Receiver>> r = NewGrpcReceiver(served.address);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : nullptr;
}

// Both ends by name, as the role factories make them.
absl::StatusOr<TransportEnds> MakeGrpc(const TransportOptions& options) {
  absl::StatusOr<std::shared_ptr<Served>> served = StartServer();
  if (!served.ok()) return served.status();
  TransportRegistry registry;
  if (absl::Status s = RegisterGrpcTransport(registry, (*served)->host.get()); !s.ok()) return s;
  TransportOptions ends = (*served)->address;
  ends.bucket_bytes = options.bucket_bytes;
  absl::StatusOr<std::unique_ptr<Publisher>> publisher = registry.NewPublisher("grpc", ends);
  if (!publisher.ok()) return publisher.status();
  (*served)->publisher = *std::move(publisher);
  absl::StatusOr<std::unique_ptr<Receiver>> receiver = registry.NewReceiver("grpc", ends);
  if (!receiver.ok()) return receiver.status();
  // The publisher end keeps the server alive; aliasing shared_ptr.
  return TransportEnds{std::shared_ptr<Publisher>(*served, (*served)->publisher.get()),
                       *std::move(receiver)};
}

INSTANTIATE_TEST_SUITE_P(Grpc, TransportConformanceTest,
                         ::testing::Values(TransportFactory{"grpc", MakeGrpc,
                                                            conformance::CorruptStaged}),
                         conformance::TransportFactoryName);

NamedTensors Weights(float v) {
  return {{"a", torch::full({1000}, v)}, {"big", torch::full({3 << 20}, v)}};
}

NamedTensors Zeros() { return {{"a", torch::zeros({1000})}, {"big", torch::zeros({3 << 20})}}; }

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

bool DeadOrLate(const absl::Status& s) {
  return s.code() == StatusCode::kDeadlineExceeded || s.code() == StatusCode::kUnavailable;
}

TEST(GrpcTransportTest, ManyChunksRoundTrip) {
  absl::StatusOr<std::shared_ptr<Served>> served = Serve({});
  ASSERT_TRUE(served.ok()) << served.status();
  auto r = ReceiverOf(**served);
  ASSERT_NE(r, nullptr);
  // 12 MB in one bucket: three full chunks and a partial one.
  ASSERT_TRUE((*served)->publisher->Publish(1, Weights(1.5)).ok());
  NamedTensors d = Zeros();
  absl::StatusOr<v1::WeightSyncStats> got = r->Receive(1, d, absl::Seconds(10));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->buckets(), 1);
  EXPECT_TRUE(torch::equal(d[1].second, Weights(1.5)[1].second));
}

TEST(GrpcTransportTest, PublisherNeverStartedIsDeadlineExceeded) {
  // A port nothing listens on (the server is gone after Shutdown).
  TransportOptions address;
  {
    absl::StatusOr<std::shared_ptr<Served>> served = Serve({});
    ASSERT_TRUE(served.ok());
    address = (*served)->address;
  }
  auto r = NewGrpcReceiver(address);
  ASSERT_TRUE(r.ok());
  NamedTensors d = Zeros();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<v1::WeightSyncStats> got = (*r)->Receive(1, d, absl::Milliseconds(500));
  EXPECT_LE(SecondsSince(start), 1.5);
  EXPECT_EQ(got.status().code(), StatusCode::kDeadlineExceeded) << got.status();
  EXPECT_NE(got.status().message().find(">= 1"), std::string::npos);
}

TEST(GrpcTransportTest, PublisherGoneMidWaitIsAnErrorByTheDeadline) {
  absl::StatusOr<std::shared_ptr<Served>> served = Serve({});
  ASSERT_TRUE(served.ok());
  auto r = ReceiverOf(**served);
  ASSERT_NE(r, nullptr);
  NamedTensors d = Zeros();
  auto waiting = std::async(std::launch::async, [&] { return r->Receive(1, d, absl::Seconds(1)); });
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
  auto r0 = ReceiverOf(**served);
  auto r1 = ReceiverOf(**served);
  ASSERT_TRUE(r0 != nullptr && r1 != nullptr);
  NamedTensors d0 = Zeros(), d1 = Zeros();
  auto f0 = std::async(std::launch::async, [&] { return r0->Receive(2, d0, absl::Seconds(10)); });
  auto f1 = std::async(std::launch::async, [&] { return r1->Receive(2, d1, absl::Seconds(10)); });
  ASSERT_TRUE((*served)->publisher->Publish(2, Weights(2)).ok());
  absl::StatusOr<v1::WeightSyncStats> g0 = f0.get(), g1 = f1.get();
  ASSERT_TRUE(g0.ok()) << g0.status();
  ASSERT_TRUE(g1.ok()) << g1.status();
  EXPECT_TRUE(torch::equal(d0[1].second, Weights(2)[1].second));
  EXPECT_TRUE(torch::equal(d1[1].second, Weights(2)[1].second));
}

TEST(GrpcTransportTest, PublisherKeepsServingAfterAReceiverWentAway) {
  absl::StatusOr<std::shared_ptr<Served>> served = Serve({});
  ASSERT_TRUE(served.ok());
  {
    auto gone = ReceiverOf(**served);
    ASSERT_NE(gone, nullptr);
    NamedTensors d = Zeros();
    EXPECT_EQ(gone->Receive(1, d, absl::Milliseconds(200)).status().code(),
              StatusCode::kDeadlineExceeded);
  }
  ASSERT_TRUE((*served)->publisher->Publish(1, Weights(1)).ok());
  auto stays = ReceiverOf(**served);
  ASSERT_NE(stays, nullptr);
  NamedTensors d = Zeros();
  absl::StatusOr<v1::WeightSyncStats> got = stays->Receive(1, d, absl::Seconds(10));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_GT(got->transfer_seconds(), 0.0);
}

// The learner's server carries the service before the job names its
// transport: a receiver that asks early waits for the publisher.
TEST(GrpcTransportTest, HostServesThePublisherItHandsOutLater) {
  absl::StatusOr<std::shared_ptr<Served>> served = StartServer();
  ASSERT_TRUE(served.ok()) << served.status();
  auto r = ReceiverOf(**served);
  ASSERT_NE(r, nullptr);
  NamedTensors d = Zeros();
  EXPECT_EQ(r->Receive(1, d, absl::Milliseconds(200)).status().code(),
            StatusCode::kDeadlineExceeded);
  auto waiting =
      std::async(std::launch::async, [&] { return r->Receive(1, d, absl::Seconds(10)); });
  absl::StatusOr<std::unique_ptr<Publisher>> publisher = (*served)->host->NewPublisher({});
  ASSERT_TRUE(publisher.ok()) << publisher.status();
  EXPECT_EQ((*served)->host->NewPublisher({}).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*publisher)->Publish(1, Weights(1)).ok());
  absl::StatusOr<v1::WeightSyncStats> got = waiting.get();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(torch::equal(d[1].second, Weights(1)[1].second));
  (*served)->publisher = *std::move(publisher);
}

TEST(GrpcTransportTest, RegisteredWithoutAHostMakesOnlyReceivers) {
  TransportRegistry registry;
  ASSERT_TRUE(RegisterGrpcTransport(registry, nullptr).ok());
  EXPECT_EQ(registry.NewPublisher("grpc", {}).status().code(), StatusCode::kFailedPrecondition);
  TransportOptions options;
  options.port = 5000;
  EXPECT_TRUE(registry.NewReceiver("grpc", options).ok());
  options.port = 0;
  EXPECT_EQ(registry.NewReceiver("grpc", options).status().code(), StatusCode::kInvalidArgument);
}

// The scheduler hands receivers the learner's gRPC server for grpc, the
// transport's own port for gloo.
TEST(GrpcTransportTest, LaunchedTransportsSayWhereTheyAreReached) {
  absl::StatusOr<TransportRegistry> launched = LaunchedTransports(nullptr);
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_EQ(*launched->EndpointOf("grpc"), Endpoint::kLearnerServer);
  EXPECT_EQ(*launched->EndpointOf("gloo"), Endpoint::kOwnPort);
  EXPECT_EQ(launched->EndpointOf("carrier_pigeon").status().code(), StatusCode::kNotFound);
#ifdef TRELLIS_WEIGHTSYNC_CUDA_IPC
  EXPECT_TRUE(launched->EndpointOf("cuda_ipc").ok());
#endif
#ifdef TRELLIS_WEIGHTSYNC_NCCL
  EXPECT_TRUE(launched->EndpointOf("nccl").ok());
#endif
}

}  // namespace
}  // namespace trellis::weightsync
