// sampling.concurrency auto (scheduler/concurrency_controller.h): a job
// launched with two actors under it records each rollout step's decode
// batch bound in the ledger, within its bounds, and samples what the same
// job with a fixed (unbounded) batch samples: rows draw from keyed streams
// (actor/internal/row_key.h), so the bound never changes a sample. An
// embedded run, which has no actor pool to size, refuses auto by name.

#include <unistd.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "config/job_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/tiny_job.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing_util::Slurp;
using testing_util::StepRecords;

constexpr int kSteps = 6;
constexpr int64_t kActors = 2;

class AutoConcurrencyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ =
        fs::path(::testing::TempDir()) / ("auto_concurrency_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    job_ = testing_util::VaryingRewardsJob(kSteps);
    job_.mutable_deployment()->mutable_actor()->set_count(kActors);
  }
  fs::path root_;
  v1::JobConfig job_;
};

TEST_F(AutoConcurrencyTest, RecordsEachStepsBoundAndSamplesAsAFixedBatchDoes) {
  testing_util::RunTrellis(root_, "launch", "fixed", job_);
  job_.mutable_sampling()->set_concurrency(v1::SamplingConfig::AUTO);
  testing_util::RunTrellis(root_, "launch", "auto", job_);

  // Each actor's shard: prompts_per_step / 2 prompts of responses_per_prompt rows.
  const int64_t rows =
      job_.grpo().prompts_per_step() * job_.grpo().responses_per_prompt() / kActors;
  const std::map<int64_t, nlohmann::json> fixed = StepRecords(root_ / "fixed");
  const std::map<int64_t, nlohmann::json> automatic = StepRecords(root_ / "auto");
  ASSERT_EQ(automatic.size(), fixed.size());
  int rollouts = 0;
  for (const auto& [step, want] : fixed) {
    const nlohmann::json& got = automatic.at(step);
    EXPECT_EQ(got.at("mean_reward"), want.at("mean_reward")) << "step " << step;
    EXPECT_EQ(got.at("generated_tokens"), want.at("generated_tokens")) << "step " << step;
    EXPECT_EQ(want.at("rollout_concurrency"), 0) << "step " << step;
    if (want.at("samples_generated").get<int64_t>() == 0) {
      EXPECT_EQ(got.at("rollout_concurrency"), 0) << "step " << step;
      continue;
    }
    const int64_t concurrency = got.at("rollout_concurrency").get<int64_t>();
    // Each actor's bound is in [1, its rows]; 0 would mean one went unbounded.
    ++rollouts;
    EXPECT_GE(concurrency, kActors) << "step " << step;
    EXPECT_LE(concurrency, kActors * rows) << "step " << step;
  }
  EXPECT_EQ(rollouts, kSteps);
}

TEST_F(AutoConcurrencyTest, AnEmbeddedRunRefusesItNamingTheField) {
  job_.mutable_sampling()->set_concurrency(v1::SamplingConfig::AUTO);
  testing_util::WriteText(root_ / "job.yaml", config::ResolvedJobYaml(job_));
  const int status = testing_util::Wait(testing_util::StartTrellis(
      {"run", (root_ / "job.yaml").string(), "--out", (root_ / "run").string()},
      root_ / "run.log"));
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_THAT(Slurp(root_ / "run.log"),
              HasSubstr("sampling.concurrency: must be fixed in an embedded run"));
}

}  // namespace
}  // namespace trellis
