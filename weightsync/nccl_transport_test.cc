// Runs where CUDA and NCCL were found at build time; every test skips with
// the reason on a machine without (two) GPUs.

#include "weightsync/nccl_transport.h"

#include <cuda_runtime.h>
#include <torch/torch.h>

#include <chrono>

#include "gtest/gtest.h"
#include "weightsync/gloo_transport.h"  // PickFreeTcpPort
#include "weightsync/internal/inprocess_testing.h"
#include "weightsync/testing/transport_conformance.h"

namespace trellis::weightsync {
namespace {

using ::absl::StatusCode;
using conformance::TransportConformanceTest;
using conformance::TransportFactory;
using conformance::TransportPair;

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

NcclEndpoint FreshEndpoint() {
  absl::StatusOr<int> port = PickFreeTcpPort("127.0.0.1");
  NcclEndpoint ep;
  ep.port = port.ok() ? *port : 0;
  ep.connect_timeout = absl::Seconds(20);
  return ep;
}

absl::StatusOr<TransportPair> MakeNccl(const TransportOptions& options) {
  NcclEndpoint ep = FreshEndpoint();
  ep.cuda_device = 0;
  absl::StatusOr<std::unique_ptr<Transport>> sender = NewNcclSender(ep, options);
  if (!sender.ok()) return sender.status();
  ep.receiver_index = 0;
  ep.cuda_device = 1;
  absl::StatusOr<std::unique_ptr<Transport>> receiver =
      NewNcclReceiver(ep, options);
  if (!receiver.ok()) return receiver.status();
  return TransportPair{std::shared_ptr<Transport>(*std::move(sender)),
                       std::shared_ptr<Transport>(*std::move(receiver))};
}

absl::Status CorruptNccl(TransportPair& pair, int bucket) {
  return internal::CorruptBucketForTesting(*pair.sender, bucket, 17);
}

INSTANTIATE_TEST_SUITE_P(
    Nccl, TransportConformanceTest,
    ::testing::Values(TransportFactory{"nccl", MakeNccl, CorruptNccl, WhyNot}),
    conformance::TransportFactoryName);

TEST(NcclTransportTest, SenderNeverStartedIsAnErrorByTheDeadline) {
  if (std::string why = WhyNot(); !why.empty()) GTEST_SKIP() << why;
  NcclEndpoint ep = FreshEndpoint();
  ep.receiver_index = 0;
  ep.cuda_device = 1;
  auto receiver = NewNcclReceiver(ep);
  ASSERT_TRUE(receiver.ok());
  NamedTensors dst = {{"w", torch::zeros({4})}};
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<v1::WeightSyncStats> got =
      (*receiver)->Receive(1, dst, absl::Seconds(1));
  EXPECT_LE(std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                          start)
                .count(),
            2.0);
  EXPECT_TRUE(got.status().code() == StatusCode::kDeadlineExceeded ||
              got.status().code() == StatusCode::kUnavailable)
      << got.status();
}

TEST(NcclTransportTest, BadEndpointsAreInvalidArgument) {
  // Needs no GPU.
  NcclEndpoint ep;
  EXPECT_EQ(NewNcclSender(ep).status().code(), StatusCode::kInvalidArgument);
  ep.port = 5000;
  ep.receiver_index = 3;
  EXPECT_EQ(NewNcclReceiver(ep).status().code(),
            StatusCode::kInvalidArgument);
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
