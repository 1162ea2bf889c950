// `trellis launch` with a fully sharded learner group (deployment.learner.
// count > 1, memory.zero_stage 3; docs/parallelism.md):
//  - a learner rank SIGKILLed after a checkpoint is restarted from it, and
//    the run ends with the uninterrupted run's per-step rewards and final
//    weights exactly;
//  - the checkpoint of four ranks resumes on two (its job.yaml edited), and
//    the run trains on to its new last step;
//  - a Hugging Face job's export loads in transformers and holds the
//    trained policy.
// Kills are placed by the run's progress (checkpoints), not by the clock.

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "config/job_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loop/recipe.h"
#include "tests/launch_util.h"
#include "tests/tiny_job.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing_util::ExitedOk;
using testing_util::ExpectNoneLeft;
using testing_util::Processes;
using testing_util::Slurp;
using testing_util::StartTrellis;
using testing_util::StepRecords;
using testing_util::StepRewards;
using testing_util::Wait;
using testing_util::WaitFor;
using testing_util::WriteText;

v1::JobConfig ShardedJob(int learners, int steps) {
  v1::JobConfig job = testing_util::VaryingRewardsJob(steps);
  job.mutable_sft()->set_steps(4);
  job.mutable_runtime()->set_checkpoint_every(2);
  job.mutable_memory()->set_zero_stage(3);
  auto* d = job.mutable_deployment();
  d->mutable_learner()->set_count(learners);
  d->set_heartbeat_interval_ms(200);
  d->set_heartbeat_timeout_ms(2000);
  d->set_stall_timeout_ms(40000);
  return job;
}

class ShardedLaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) / ("sharded_launch_test_" + std::to_string(::getpid()));
    fs::create_directories(root_);
  }

  // Launches `yaml` (or resumes `name`) into root/NAME; the launcher's pid.
  pid_t Launch(const std::string& name, const std::string& yaml) {
    if (yaml.empty()) {
      return StartTrellis({"launch", "--resume", (root_ / name).string()},
                          root_ / (name + ".resume.log"));
    }
    WriteText(root_ / (name + ".yaml"), yaml);
    return StartTrellis(
        {"launch", (root_ / (name + ".yaml")).string(), "--out", (root_ / name).string()},
        root_ / (name + ".log"));
  }

  fs::path root_;
};

TEST_F(ShardedLaunchTest, AKilledRankResumesBitExactly) {
  constexpr int kSteps = 8;
  const std::string yaml = config::ResolvedJobYaml(ShardedJob(2, kSteps));
  ASSERT_TRUE(ExitedOk(Wait(Launch("straight", yaml)))) << Slurp(root_ / "straight.log");

  const fs::path out = root_ / "killed";
  const pid_t launcher = Launch("killed", yaml);
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::string latest = Slurp(out / "checkpoints" / "latest");
        return latest.size() > 5 && std::stoi(latest.substr(5)) >= 4;
      },
      300))
      << Slurp(root_ / "killed.log");
  ASSERT_EQ(::kill(Processes(out).at("learner-1"), SIGKILL), 0);
  const int status = Wait(launcher);
  const std::string log = Slurp(root_ / "killed.log");
  ASSERT_TRUE(ExitedOk(status)) << log;
  EXPECT_THAT(log, HasSubstr("[launch] restart 1 of 3: "));
  EXPECT_THAT(log, HasSubstr("resuming from"));
  const std::map<int64_t, double> want = StepRewards(root_ / "straight");
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(StepRewards(out), want);
  const std::string weights = Slurp(root_ / "straight" / "policy.safetensors");
  ASSERT_FALSE(weights.empty());
  EXPECT_TRUE(weights == Slurp(out / "policy.safetensors")) << "final weights differ";
  ExpectNoneLeft(Processes(out));
}

TEST_F(ShardedLaunchTest, FourRanksCheckpointResumesOnTwo) {
  const fs::path out = root_ / "four";
  ASSERT_TRUE(ExitedOk(Wait(Launch("four", config::ResolvedJobYaml(ShardedJob(4, 4))))))
      << Slurp(root_ / "four.log");
  ASSERT_TRUE(fs::exists(out / "checkpoints" / "step_4" / "shards.rank3.safetensors"));
  ASSERT_TRUE(fs::exists(out / "checkpoints" / "step_4" / "shards.index.json"));
  // Two ranks and two more steps: the job the run directory resumes with.
  WriteText(out / "job.yaml", config::ResolvedJobYaml(ShardedJob(2, 6)));
  const int status = Wait(Launch("four", ""));
  const std::string log = Slurp(root_ / "four.resume.log");
  ASSERT_TRUE(ExitedOk(status)) << log;
  EXPECT_THAT(log, HasSubstr("resuming from " + (out / "checkpoints" / "step_4").string()));
  EXPECT_THAT(log, ::testing::Not(HasSubstr("[learner-2]")));
  EXPECT_THAT(log, HasSubstr("step    6/6"));
  EXPECT_EQ(StepRecords(out).size(), 6u) << log;
  ExpectNoneLeft(Processes(out));
}

// The resharding weight sync (each learner rank publishes its shards, each
// actor rank receives only its slices; docs/parallelism.md) samples what
// rank 0's whole-tensor publishing samples: the same job on the grpc
// transport, which does not reshard, gives the same per-step rewards and
// token counts. Every learner rank stages its own share for the actors.
// The resharded run's links are the tcp transport's (the other tests here
// reshard over gloo, the default).
TEST_F(ShardedLaunchTest, ReshardingSyncSamplesAsTheWholeSync) {
  v1::JobConfig job = ShardedJob(2, 3);
  job.mutable_runtime()->set_checkpoint_every(0);
  job.mutable_model()->set_n_heads(4);
  job.mutable_model()->set_n_kv_heads(2);
  job.mutable_deployment()->mutable_actor()->set_tensor_parallel(2);
  job.mutable_deployment()->set_weight_transport("tcp");
  ASSERT_TRUE(ExitedOk(Wait(Launch("resharded", config::ResolvedJobYaml(job)))))
      << Slurp(root_ / "resharded.log");
  job.mutable_deployment()->set_weight_transport("grpc");
  ASSERT_TRUE(ExitedOk(Wait(Launch("whole", config::ResolvedJobYaml(job)))))
      << Slurp(root_ / "whole.log");
  const std::map<int64_t, nlohmann::json> resharded = StepRecords(root_ / "resharded");
  const std::map<int64_t, nlohmann::json> whole = StepRecords(root_ / "whole");
  ASSERT_EQ(resharded.size(), 3u);
  ASSERT_EQ(whole.size(), 3u);
  for (const auto& [step, record] : whole) {
    EXPECT_EQ(resharded.at(step)["mean_reward"], record["mean_reward"]) << "step " << step;
    EXPECT_EQ(resharded.at(step)["generated_tokens"], record["generated_tokens"]) << step;
  }
  // Each learner rank's staged buckets, as its own ledger recorded them.
  const std::string ledger = Slurp(root_ / "resharded" / "ledger.jsonl");
  for (const char* rank : {"learner-0", "learner-1"}) {
    EXPECT_THAT(ledger, ::testing::ContainsRegex(absl::StrCat(
                            R"("object":"communication","role":")", rank,
                            R"(","stage":"weight_sync")")))
        << rank;
  }
}

// A Hugging Face job's export, written from weights gathered unit by unit,
// loads in transformers and holds the run's trained policy exactly
// (scripts/check_run_export.sh; skipped, saying why, where its venv cannot
// be made).
TEST_F(ShardedLaunchTest, ExportOfAShardedRunLoadsInTransformers) {
  const fs::path out = root_ / "hf_run";
  v1::JobConfig job = testing_util::OnQwen2Arith(ShardedJob(2, 2));
  ASSERT_TRUE(loop::PrepareJob(&job).ok());
  ASSERT_TRUE(ExitedOk(Wait(Launch("hf_run", config::ResolvedJobYaml(job)))))
      << Slurp(root_ / "hf_run.log");
  ASSERT_TRUE(fs::exists(out / "hf" / "model.safetensors"));
  const std::string check = std::string(TRELLIS_SOURCE_DIR) + "/scripts/check_run_export.sh";
  const std::string log = (root_ / "check.log").string();
  const int status =
      std::system((check + " --if-venv " + out.string() + " >" + log + " 2>&1").c_str());
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) GTEST_SKIP() << Slurp(log);
  EXPECT_TRUE(ExitedOk(status)) << Slurp(log);
  EXPECT_THAT(Slurp(log), HasSubstr("largest difference 0.000e+00"));
}

}  // namespace
}  // namespace trellis
