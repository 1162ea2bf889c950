// The rollout engine's sampling is keyed by the sample (actor/internal/
// row_key.h), not by the actor or batch a row lands in: a job launched
// with 1, 2 or 3 actors (the actor pool splits each request's prompts among
// them) gives the embedded run's per-step rewards exactly.

#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>

#include "config/job_config.h"
#include "gtest/gtest.h"
#include "tests/tiny_job.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using testing_util::StepRewards;

constexpr int kSteps = 4;

TEST(ActorCountTest, LaunchedWithOneTwoOrThreeActorsMatchesTheEmbeddedRun) {
  const fs::path root =
      fs::path(::testing::TempDir()) / ("actor_count_test_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  // Six prompts a step: three actors get two each, two get three.
  v1::JobConfig job = testing_util::VaryingRewardsJob(kSteps);
  job.mutable_grpo()->set_prompts_per_step(6);
  testing_util::RunTrellis(root, "run", "embedded", job);
  const std::map<int64_t, double> want = StepRewards(root / "embedded");
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));

  for (int actors : {1, 2, 3}) {
    const std::string name = "launched" + std::to_string(actors);
    job.mutable_deployment()->mutable_actor()->set_count(actors);
    testing_util::RunTrellis(root, "launch", name, job);
    EXPECT_EQ(StepRewards(root / name), want) << actors << " actors";
  }
}

}  // namespace
}  // namespace trellis
