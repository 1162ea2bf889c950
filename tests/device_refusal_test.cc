// A runtime.device cuda job where no CUDA device is visible is refused by
// `trellis run` and `trellis launch` before anything is made (the one
// check, model::CheckDeviceVisible; docs/gpu.md): exit status 1, a message
// naming the field and CUDA_VISIBLE_DEVICES, and no run directory. The
// test hides every device (CUDA_VISIBLE_DEVICES=""), so it holds on a
// machine with GPUs too.

#include <cstdlib>
#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/tiny_job.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class DeviceRefusalTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DeviceRefusalTest, CudaJobWithoutAVisibleDeviceIsRefusedBeforeItStarts) {
  const std::string command = GetParam();
  const fs::path root = fs::path(::testing::TempDir()) / ("device_refusal_" + command);
  fs::remove_all(root);
  fs::create_directories(root);
  v1::JobConfig job = testing_util::TinyJob();
  job.mutable_runtime()->set_device(v1::RuntimeConfig::CUDA);
  for (v1::RoleDeployment* role :
       {job.mutable_deployment()->mutable_actor(), job.mutable_deployment()->mutable_learner(),
        job.mutable_deployment()->mutable_reference()}) {
    role->set_gpus_per_worker(1);
  }
  testing_util::WriteText(root / "job.yaml", config::ResolvedJobYaml(job));
  ASSERT_EQ(::setenv("CUDA_VISIBLE_DEVICES", "", 1), 0);
  const int status = testing_util::Wait(testing_util::StartTrellis(
      {command, (root / "job.yaml").string(), "--out", (root / "run").string()}, root / "log"));
  const std::string log = testing_util::Slurp(root / "log");
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 1) << log;
  EXPECT_THAT(log, HasSubstr("runtime.device: cuda, but no CUDA device is visible"));
  EXPECT_THAT(log, HasSubstr("CUDA_VISIBLE_DEVICES=\"\""));
  EXPECT_FALSE(fs::exists(root / "run" / "ledger.jsonl")) << log;
  EXPECT_FALSE(fs::exists(root / "run" / "launch")) << log;
}

INSTANTIATE_TEST_SUITE_P(Commands, DeviceRefusalTest, ::testing::Values("run", "launch"));

}  // namespace
}  // namespace trellis
