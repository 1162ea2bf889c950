// Built where LibTorch has CUDA; every test that needs a GPU skips with the
// reason on a machine without one. The conformance suite runs both ends in
// this process (the receiver reads the buckets at their addresses); the
// two-process test runs the receiver in a child, this binary started
// again, where the IPC handles themselves are opened.

#include "weightsync/cuda_ipc_transport.h"

#include <spawn.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "weightsync/testing/gpu_transport_checks.h"
#include "weightsync/testing/transport_conformance.h"

extern char** environ;

namespace trellis::weightsync {
namespace {

using ::absl::StatusCode;
using conformance::FreshStoreOptions;
using conformance::TransportConformanceTest;
using conformance::TransportEnds;
using conformance::TransportFactory;

// Set in the child of the two-process test: the publisher's store port,
// and the pipe on which the child reports each version it received.
constexpr char kChildPortEnv[] = "TRELLIS_CUDA_IPC_TEST_PORT";
constexpr char kChildAckEnv[] = "TRELLIS_CUDA_IPC_TEST_ACK_FD";
constexpr int64_t kChildVersions = 3;

std::string WhyNot() {
  if (!torch::cuda::is_available()) {
    return "no CUDA device visible: torch::cuda::is_available() is false";
  }
  const absl::Status s = CudaIpcAvailable();
  return s.ok() ? "" : std::string(s.message());
}

// Both ends by name, as the role factories make them, in this process.
absl::StatusOr<TransportEnds> MakeCudaIpc(const TransportOptions& base) {
  return conformance::MakeOnDevices(RegisterCudaIpcTransport, "cuda_ipc", base,
                                    /*publisher_device=*/0, /*receiver_device=*/0);
}

INSTANTIATE_TEST_SUITE_P(CudaIpc, TransportConformanceTest,
                         ::testing::Values(TransportFactory{"cuda_ipc", MakeCudaIpc,
                                                            conformance::CorruptStaged, WhyNot}),
                         conformance::TransportFactoryName);

// Version `v` of the two-process test's weights, on the GPU: 4 MB that
// outgrow a 1 MiB bucket, and a small double tensor.
NamedTensors DeviceWeights(int64_t v) {
  const auto on_gpu = torch::TensorOptions().device(torch::kCUDA, 0);
  NamedTensors w;
  w.emplace_back("w", torch::arange(1 << 20, on_gpu.dtype(torch::kFloat)) + static_cast<double>(v));
  w.emplace_back("b", torch::full({33}, static_cast<double>(v), on_gpu.dtype(torch::kDouble)));
  return w;
}

// The child's side: receives every version up to kChildVersions into GPU
// tensors through the IPC handles, reporting each to the parent, which
// publishes the next only then (so the handles opened for the first are
// reused by the later ones). Skips unless started by the parent.
TEST(CudaIpcTwoProcessTest, ChildReceiver) {
  const char* port = std::getenv(kChildPortEnv);
  if (port == nullptr)
    GTEST_SKIP() << "runs only as the child of PublisherAndReceiverInTwoProcesses";
  const char* ack = std::getenv(kChildAckEnv);
  ASSERT_NE(ack, nullptr);
  TransportOptions options;
  options.port = std::atoi(port);
  options.connect_timeout = absl::Seconds(20);
  absl::StatusOr<std::unique_ptr<Receiver>> receiver = NewCudaIpcReceiver(options);
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  NamedTensors dst = DeviceWeights(0);
  for (int64_t next = 1; next <= kChildVersions;) {
    absl::StatusOr<v1::WeightSyncStats> got = (*receiver)->Receive(next, dst, absl::Seconds(30));
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_GE(got->version(), next);
    const NamedTensors want = DeviceWeights(got->version());
    for (size_t i = 0; i < dst.size(); ++i) {
      ASSERT_TRUE(torch::equal(dst[i].second, want[i].second))
          << dst[i].first << " of version " << got->version();
    }
    const int64_t version = got->version();
    ASSERT_EQ(write(std::atoi(ack), &version, sizeof(version)), sizeof(version));
    next = version + 1;
  }
}

TEST(CudaIpcTwoProcessTest, PublisherAndReceiverInTwoProcesses) {
  if (std::getenv(kChildPortEnv) != nullptr) GTEST_SKIP() << "the child runs ChildReceiver only";
  if (std::string why = WhyNot(); !why.empty()) GTEST_SKIP() << why;
  TransportOptions options = FreshStoreOptions();
  options.bucket_bytes = 1 << 20;
  absl::StatusOr<std::unique_ptr<Publisher>> publisher = NewCudaIpcPublisher(options);
  ASSERT_TRUE(publisher.ok()) << publisher.status();

  std::string filter = "--gtest_filter=CudaIpcTwoProcessTest.ChildReceiver";
  std::string self = "/proc/self/exe";
  std::vector<char*> argv = {self.data(), filter.data(), nullptr};
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  int acks[2];
  ASSERT_EQ(pipe(acks), 0);
  env_strings.push_back(std::string(kChildPortEnv) + "=" + std::to_string(options.port));
  env_strings.push_back(std::string(kChildAckEnv) + "=" + std::to_string(acks[1]));
  std::vector<char*> env;
  for (std::string& e : env_strings) env.push_back(e.data());
  env.push_back(nullptr);
  pid_t child = 0;
  ASSERT_EQ(posix_spawn(&child, self.c_str(), nullptr, nullptr, argv.data(), env.data()), 0);
  close(acks[1]);  // The child's now: a read sees its end when it exits.

  for (int64_t v = 1; v <= kChildVersions; ++v) {
    absl::StatusOr<v1::WeightSyncStats> sent = (*publisher)->Publish(v, DeviceWeights(v));
    ASSERT_TRUE(sent.ok()) << sent.status();
    EXPECT_GE(sent->buckets(), 4);
    int64_t received = 0;
    if (read(acks[0], &received, sizeof(received)) != sizeof(received)) break;  // It failed.
    EXPECT_EQ(received, v);
  }
  close(acks[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the receiver process died";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the receiver process failed (its output is above)";
}

TEST(CudaIpcTransportTest, PublisherNeverStartedIsAnErrorByTheDeadline) {
  if (std::string why = WhyNot(); !why.empty()) GTEST_SKIP() << why;
  absl::StatusOr<std::unique_ptr<Receiver>> receiver = NewCudaIpcReceiver(FreshStoreOptions());
  ASSERT_TRUE(receiver.ok());
  conformance::ExpectNoPublisherIsAnError(**receiver);
}

TEST(CudaIpcTransportTest, BadOptionsAreInvalidArgument) {
  // Needs no GPU: the options are checked first.
  conformance::ExpectBadOptionsAreInvalidArgument(NewCudaIpcPublisher, NewCudaIpcReceiver);
}

TEST(CudaIpcTransportTest, MissingDeviceIsFailedPreconditionNamingIt) {
  // Needs no GPU: no machine has device 1000.
  TransportOptions options = FreshStoreOptions();
  options.cuda_device = 1000;
  absl::StatusOr<std::unique_ptr<Publisher>> publisher = NewCudaIpcPublisher(options);
  EXPECT_EQ(publisher.status().code(), StatusCode::kFailedPrecondition) << publisher.status();
  if (CudaIpcAvailable().ok()) {
    EXPECT_NE(publisher.status().message().find("cuda_device 1000"), std::string::npos)
        << publisher.status();
  }
}

}  // namespace
}  // namespace trellis::weightsync
