// Runs where CUDA and NCCL were found at build time; every test skips with
// the reason on a machine without (two) GPUs.

#include "weightsync/nccl_transport.h"

#include <cuda_runtime.h>

#include <chrono>

#include "gtest/gtest.h"
#include "weightsync/testing/gpu_transport_checks.h"
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

// Both ends by name, as the role factories make them: the publisher on GPU
// 0, the receiver on GPU 1.
absl::StatusOr<TransportEnds> MakeNccl(const TransportOptions& base) {
  return conformance::MakeOnDevices(RegisterNcclTransport, "nccl", base, /*publisher_device=*/0,
                                    /*receiver_device=*/1);
}

INSTANTIATE_TEST_SUITE_P(Nccl, TransportConformanceTest,
                         ::testing::Values(TransportFactory{"nccl", MakeNccl,
                                                            conformance::CorruptStaged, WhyNot}),
                         conformance::TransportFactoryName);

TEST(NcclTransportTest, PublisherNeverStartedIsAnErrorByTheDeadline) {
  if (std::string why = WhyNot(); !why.empty()) GTEST_SKIP() << why;
  TransportOptions options = conformance::FreshStoreOptions();
  options.cuda_device = 1;
  auto receiver = NewNcclReceiver(options);
  ASSERT_TRUE(receiver.ok());
  const auto start = std::chrono::steady_clock::now();
  conformance::ExpectNoPublisherIsAnError(**receiver);
  EXPECT_LE(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0);
}

TEST(NcclTransportTest, BadOptionsAreInvalidArgument) {
  // Needs no GPU.
  conformance::ExpectBadOptionsAreInvalidArgument(NewNcclPublisher, NewNcclReceiver);
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
