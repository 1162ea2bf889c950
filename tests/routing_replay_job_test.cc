// Routing replay in whole jobs (docs/models.md#routing-replay): a GRPO job
// on a mixture-of-experts policy with grpo.routing_replay records every
// sample's experts in the actor, replays them in the learner, and reports
// the routing in each step's ledger record; launched, the records travel
// with the samples over gRPC and the run equals the embedded one.

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>

#include "config/job_config.h"
#include "gtest/gtest.h"
#include "tests/launch_util.h"
#include "tests/tiny_job.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using testing_util::ExitedOk;
using testing_util::Slurp;
using testing_util::StartTrellis;
using testing_util::StepRecords;
using testing_util::StepRewards;
using testing_util::Wait;
using testing_util::WriteText;

// The varying-rewards tiny job on four experts, two per token.
v1::JobConfig MoeJob(bool replay) {
  v1::JobConfig job = testing_util::VaryingRewardsJob(3);
  job.mutable_model()->set_num_experts(4);
  job.mutable_model()->set_experts_per_token(2);
  job.mutable_model()->set_router_aux_loss_coef(0.01f);
  job.mutable_grpo()->set_routing_replay(replay);
  return job;
}

class RoutingReplayJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) / ("routing_replay_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }

  // Runs `job` with `command` ("run" or "launch") into root_/name.
  fs::path Run(const v1::JobConfig& job, const std::string& command, const std::string& name) {
    WriteText(root_ / (name + ".yaml"), config::ResolvedJobYaml(job));
    const int status = Wait(StartTrellis(
        {command, (root_ / (name + ".yaml")).string(), "--out", (root_ / name).string()},
        root_ / (name + ".log")));
    EXPECT_TRUE(ExitedOk(status)) << Slurp(root_ / (name + ".log"));
    return root_ / name;
  }

  fs::path root_;
};

TEST_F(RoutingReplayJobTest, EachStepRecordsTheRoutingItReplayed) {
  const fs::path dir = Run(MoeJob(true), "run", "embedded");
  const std::map<int64_t, nlohmann::json> steps = StepRecords(dir);
  ASSERT_EQ(steps.size(), 3u);
  for (const auto& [step, record] : steps) {
    SCOPED_TRACE(testing::Message() << "step " << step);
    // Every sample's record: one byte per position, layer and expert slot.
    EXPECT_GT(record["routing_record_bytes"].get<int64_t>(), 0);
    EXPECT_GT(record["router_aux_loss"].get<double>(), 0);
    EXPECT_GE(record["routing_mismatch"].get<double>(), 0);
    // The synchronous loop trains on the actor's weights: with the record's
    // routing the learner's log-probs are the actor's to float rounding.
    EXPECT_LT(record["logprob_gap_replayed"].get<double>(), 1e-4);
    EXPECT_GE(record["logprob_gap_own_routing"].get<double>(),
              record["logprob_gap_replayed"].get<double>() - 1e-6);
  }
}

TEST_F(RoutingReplayJobTest, WithoutReplayNothingIsRecorded) {
  const std::map<int64_t, nlohmann::json> steps = StepRecords(Run(MoeJob(false), "run", "off"));
  ASSERT_EQ(steps.size(), 3u);
  for (const auto& [step, record] : steps) {
    EXPECT_EQ(record["routing_record_bytes"].get<int64_t>(), 0) << "step " << step;
    EXPECT_GT(record["router_aux_loss"].get<double>(), 0) << "step " << step;
  }
}

TEST_F(RoutingReplayJobTest, LaunchedTheRecordsTravelWithTheSamples) {
  v1::JobConfig job = MoeJob(true);
  job.mutable_deployment()->set_heartbeat_interval_ms(200);
  const std::map<int64_t, double> embedded = StepRewards(Run(job, "run", "embedded"));
  const fs::path launched = Run(job, "launch", "launched");
  EXPECT_EQ(StepRewards(launched), embedded);
  for (const auto& [step, record] : StepRecords(launched)) {
    EXPECT_GT(record["routing_record_bytes"].get<int64_t>(), 0) << "step " << step;
    EXPECT_LT(record["logprob_gap_replayed"].get<double>(), 1e-4) << "step " << step;
  }
}

TEST_F(RoutingReplayJobTest, ADenseModelIsRefused) {
  v1::JobConfig job = testing_util::VaryingRewardsJob(1);
  job.mutable_grpo()->set_routing_replay(true);
  WriteText(root_ / "dense.yaml", config::ResolvedJobYaml(job));
  const int status = Wait(StartTrellis(
      {"run", (root_ / "dense.yaml").string(), "--out", (root_ / "dense").string()},
      root_ / "dense.log"));
  EXPECT_FALSE(ExitedOk(status));
  EXPECT_NE(Slurp(root_ / "dense.log")
                .find("grpo.routing_replay: must be false for a dense model"),
            std::string::npos)
      << Slurp(root_ / "dense.log");
}

}  // namespace
}  // namespace trellis
