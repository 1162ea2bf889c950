#include "model/device.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::model {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::JobConfig Job(v1::RuntimeConfig::Device device,
                  v1::DeploymentConfig::Placement placement = v1::DeploymentConfig::DISAGGREGATED) {
  v1::JobConfig job;
  job.mutable_runtime()->set_device(device);
  job.mutable_deployment()->set_placement(placement);
  return job;
}

std::string On(const v1::JobConfig& job, v1::Role role, Binding binding, int visible) {
  return RoleDevice(job, role, binding, visible).ToString();
}

TEST(DeviceTest, CpuJobsAndTheVerifierComputeOnTheCpu) {
  const v1::JobConfig cpu = Job(v1::RuntimeConfig::CPU);
  for (v1::Role role : {v1::ACTOR, v1::LEARNER, v1::REFERENCE, v1::VERIFIER}) {
    EXPECT_EQ(On(cpu, role, Binding::kEmbedded, 2), "cpu");
    EXPECT_EQ(On(cpu, role, Binding::kServed, 1), "cpu");
  }
  EXPECT_EQ(On(Job(v1::RuntimeConfig::CUDA), v1::VERIFIER, Binding::kEmbedded, 2), "cpu");
}

TEST(DeviceTest, EmbeddedDisaggregatedPutsTheActorOnTheLastDevice) {
  const v1::JobConfig job = Job(v1::RuntimeConfig::CUDA);
  EXPECT_EQ(On(job, v1::ACTOR, Binding::kEmbedded, 4), "cuda:3");
  EXPECT_EQ(On(job, v1::LEARNER, Binding::kEmbedded, 4), "cuda:0");
  EXPECT_EQ(On(job, v1::REFERENCE, Binding::kEmbedded, 4), "cuda:0");
  // One device: all share it.
  EXPECT_EQ(On(job, v1::ACTOR, Binding::kEmbedded, 1), "cuda:0");
}

TEST(DeviceTest, EmbeddedColocatedPutsEveryRoleOnTheFirstDevice) {
  const v1::JobConfig job = Job(v1::RuntimeConfig::CUDA, v1::DeploymentConfig::COLOCATED);
  for (v1::Role role : {v1::ACTOR, v1::LEARNER, v1::REFERENCE}) {
    EXPECT_EQ(On(job, role, Binding::kEmbedded, 4), "cuda:0");
  }
}

TEST(DeviceTest, AServedWorkerComputesOnItsFirstGpu) {
  for (auto placement : {v1::DeploymentConfig::DISAGGREGATED, v1::DeploymentConfig::COLOCATED}) {
    const v1::JobConfig job = Job(v1::RuntimeConfig::CUDA, placement);
    for (v1::Role role : {v1::ACTOR, v1::LEARNER, v1::REFERENCE}) {
      EXPECT_EQ(On(job, role, Binding::kServed, 2), "cuda:0");
    }
  }
}

std::vector<std::string> Ranks(const v1::JobConfig& job, v1::Role role, Binding binding,
                               int visible) {
  std::vector<std::string> on;
  for (const Device& d : RankDevices(job, role, binding, visible)) on.push_back(d.ToString());
  return on;
}

TEST(DeviceTest, AServedTensorParallelReplicaPutsEachRankOnItsOwnGpus) {
  v1::JobConfig job = Job(v1::RuntimeConfig::CUDA);
  job.mutable_deployment()->mutable_actor()->set_tensor_parallel(2);
  job.mutable_deployment()->mutable_reference()->set_tensor_parallel(4);
  EXPECT_THAT(Ranks(job, v1::ACTOR, Binding::kServed, 2), ElementsAre("cuda:0", "cuda:1"));
  // Two GPUs a rank (gpus_per_worker 2): each rank on the first of its own.
  EXPECT_THAT(Ranks(job, v1::ACTOR, Binding::kServed, 4), ElementsAre("cuda:0", "cuda:2"));
  EXPECT_THAT(Ranks(job, v1::REFERENCE, Binding::kServed, 4),
              ElementsAre("cuda:0", "cuda:1", "cuda:2", "cuda:3"));
  // Only rank 0's GPU visible (a group split over nodes): all on it.
  EXPECT_THAT(Ranks(job, v1::ACTOR, Binding::kServed, 1), ElementsAre("cuda:0", "cuda:0"));
  EXPECT_THAT(Ranks(job, v1::ACTOR, Binding::kServed, 3), ElementsAre("cuda:0", "cuda:0"));
  // Embedded, the other roles' devices are the process's too.
  EXPECT_THAT(Ranks(job, v1::ACTOR, Binding::kEmbedded, 4), ElementsAre("cuda:3", "cuda:3"));
  EXPECT_THAT(Ranks(job, v1::LEARNER, Binding::kServed, 4), ElementsAre("cuda:0"));
  job.mutable_runtime()->set_device(v1::RuntimeConfig::CPU);
  EXPECT_THAT(Ranks(job, v1::ACTOR, Binding::kServed, 0), ElementsAre("cpu", "cpu"));
}

TEST(DeviceTest, ACudaJobWithoutAVisibleDeviceIsRefusedNamingTheField) {
  const absl::Status refused = CheckDeviceVisible(Job(v1::RuntimeConfig::CUDA), 0);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.message()),
              HasSubstr("runtime.device: cuda, but no CUDA device is visible"));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("CUDA_VISIBLE_DEVICES"));
  EXPECT_TRUE(CheckDeviceVisible(Job(v1::RuntimeConfig::CUDA), 1).ok());
  EXPECT_TRUE(CheckDeviceVisible(Job(v1::RuntimeConfig::CPU), 0).ok());
}

}  // namespace
}  // namespace trellis::model
