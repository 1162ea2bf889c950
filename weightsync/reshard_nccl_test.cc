// The resharding sync over NCCL (weightsync/reshard.h with the "nccl"
// transport): built where CUDA and NCCL were found; skips with the reason
// on a machine without two GPUs. Learner ranks on GPU 0, actor ranks on
// GPU 1: every link's two NCCL ranks are on different devices.

#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/tcp_store.h"
#include "gtest/gtest.h"
#include "weightsync/nccl_transport.h"
#include "weightsync/reshard.h"
#include "weightsync/testing/reshard_model.h"

namespace trellis::weightsync {
namespace {

std::string WhyNot() {
  if (absl::Status s = NcclAvailable(); !s.ok()) return std::string(s.message());
  int count = 0;
  cudaGetDeviceCount(&count);
  if (count < 2) {
    return "needs 2 CUDA devices (the two NCCL ranks of a link in one process), found " +
           std::to_string(count);
  }
  return "";
}

TEST(ReshardNcclTest, TwoLearnerRanksToTwoActorRanks) {
  if (std::string why = WhyNot(); !why.empty()) GTEST_SKIP() << why;
  TransportRegistry registry;
  ASSERT_TRUE(RegisterNcclTransport(registry).ok());
  absl::StatusOr<ReshardPlan> made =
      ReshardPlan::Make(testing::ModelUnits(testing::ModelShape{2, 12, 6, 24, 18}, 2), 2);
  ASSERT_TRUE(made.ok()) << made.status();
  auto plan = std::make_shared<const ReshardPlan>(*std::move(made));
  ReshardOptions options;
  options.transport_name = "nccl";
  options.transport.bucket_bytes = 1024;
  options.transport.connect_timeout = absl::Seconds(30);
  for (int i = 0; i < 4; ++i) options.ports.push_back(comm::PickFreeTcpPort().value_or(0));
  const std::vector<at::Tensor> full = testing::FullUnits(*plan, 1);
  std::vector<std::unique_ptr<ReshardSender>> senders;
  options.transport.cuda_device = 0;
  for (int n = 0; n < 2; ++n) {
    auto s = ReshardSender::Start(plan, n, options, &registry);
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE((*s)->Publish(1, testing::ShardsOf(full, *plan, n)).ok());
    senders.push_back(*std::move(s));
  }
  options.transport.cuda_device = 1;
  std::vector<absl::StatusOr<ReshardReceived>> got(2, absl::UnknownError("not run"));
  {
    std::vector<std::jthread> actors;
    for (int k = 0; k < 2; ++k) {
      actors.emplace_back([&, k] {
        absl::StatusOr<std::unique_ptr<ReshardReceiver>> r =
            ReshardReceiver::Start(plan, k, options, &registry);
        got[k] = r.ok() ? (*r)->Receive(1, absl::Seconds(60)) : r.status();
      });
    }
  }
  for (int k = 0; k < 2; ++k) {
    ASSERT_TRUE(got[k].ok()) << got[k].status();
    EXPECT_EQ(got[k]->bytes, plan->SliceBytes(k));
    for (size_t i = 0; i < got[k]->tensors.size(); ++i) {
      const ReshardPlan::Slice& s = plan->Slices(k)[i];
      EXPECT_TRUE(at::equal(
          got[k]->tensors[i].second,
          testing::ExpectedSlice(full, *plan, s.unit, plan->units()[s.unit].entries[s.entry], k)))
          << s.name;
    }
  }
}

}  // namespace
}  // namespace trellis::weightsync
