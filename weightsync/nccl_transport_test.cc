// Runs where CUDA and NCCL were found at build time; every test skips with
// the reason on a machine without (two) GPUs.

#include "weightsync/nccl_transport.h"

#include <cuda_runtime.h>
#include <torch/torch.h>

#include <chrono>

#include "comm/tcp_store.h"
#include "gtest/gtest.h"
#include "weightsync/registry.h"
#include "weightsync/testing/transport_conformance.h"

namespace trellis::weightsync {
namespace {

using ::absl::StatusCode;
using conformance::TransportConformanceTest;
using conformance::TransportEnds;
using conformance::TransportFactory;

// NCCL puts each rank of a communicator on its own GPU, so a sender and a
// receiver in one process need two.
std::string WhyNot() {
  if (absl::Status s = NcclAvailable(); !s.ok()) {
    return std::string(s.message());
  }
  int count = 0;
  cudaGetDeviceCount(&count);
  if (count < 2) {
    return "needs 2 CUDA devices (one per NCCL rank in this process), found " +
           std::to_string(count);
  }
  return "";
}

TransportOptions FreshOptions() {
  absl::StatusOr<int> port = comm::PickFreeTcpPort("127.0.0.1");
  TransportOptions options;
  options.port = port.ok() ? *port : 0;
  options.connect_timeout = absl::Seconds(20);
  return options;
}

// Both ends by name, as the role factories make them: the publisher on GPU
// 0, the receiver on GPU 1.
absl::StatusOr<TransportEnds> MakeNccl(const TransportOptions& base) {
  TransportRegistry registry;
  if (absl::Status s = RegisterNcclTransport(registry); !s.ok()) return s;
  TransportOptions options = FreshOptions();
  options.bucket_bytes = base.bucket_bytes;
  options.cuda_device = 0;
  absl::StatusOr<std::unique_ptr<Publisher>> publisher = registry.NewPublisher("nccl", options);
  if (!publisher.ok()) return publisher.status();
  options.cuda_device = 1;
  absl::StatusOr<std::unique_ptr<Receiver>> receiver = registry.NewReceiver("nccl", options);
  if (!receiver.ok()) return receiver.status();
  return TransportEnds{*std::move(publisher), *std::move(receiver)};
}

INSTANTIATE_TEST_SUITE_P(Nccl, TransportConformanceTest,
                         ::testing::Values(TransportFactory{"nccl", MakeNccl,
                                                            conformance::CorruptStaged, WhyNot}),
                         conformance::TransportFactoryName);

TEST(NcclTransportTest, PublisherNeverStartedIsAnErrorByTheDeadline) {
  if (std::string why = WhyNot(); !why.empty()) GTEST_SKIP() << why;
  TransportOptions options = FreshOptions();
  options.cuda_device = 1;
  auto receiver = NewNcclReceiver(options);
  ASSERT_TRUE(receiver.ok());
  NamedTensors dst = {{"w", torch::zeros({4})}};
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<v1::WeightSyncStats> got = (*receiver)->Receive(1, dst, absl::Seconds(1));
  EXPECT_LE(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0);
  EXPECT_TRUE(got.status().code() == StatusCode::kDeadlineExceeded ||
              got.status().code() == StatusCode::kUnavailable)
      << got.status();
}

TEST(NcclTransportTest, BadOptionsAreInvalidArgument) {
  // Needs no GPU.
  TransportOptions options;
  EXPECT_EQ(NewNcclPublisher(options).status().code(), StatusCode::kInvalidArgument);
  options.port = 5000;
  options.receiver_index = 3;
  EXPECT_EQ(NewNcclReceiver(options).status().code(), StatusCode::kInvalidArgument);
}

TEST(NcclTransportTest, AvailabilityIsReported) {
  const absl::Status s = NcclAvailable();
  if (!s.ok()) {
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    GTEST_SKIP() << s.message();
  }
}

}  // namespace
}  // namespace trellis::weightsync
