// The rollout engine's sampling is keyed by the sample (actor/internal/
// row_key.h), not by the actor or batch a row lands in: a job launched
// with 1, 2 or 3 actors (the actor pool splits each request's prompts among
// them) gives the embedded run's per-step rewards exactly. Its ledger
// accounts the same arithmetic per stage as the embedded run's, though the
// learner, the reference and the actors compute in other processes
// (loop/metered_roles.h).

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "config/job_config.h"
#include "gtest/gtest.h"
#include "tests/tiny_job.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using testing_util::StepRewards;

constexpr int kSteps = 4;

// The run's FLOP per stage (summary.json compute.stages), the stages that
// computed anything.
std::map<std::string, double> StageFlops(const fs::path& dir) {
  std::ifstream in(dir / "summary.json");
  const nlohmann::json stages = nlohmann::json::parse(in)["compute"]["stages"];
  std::map<std::string, double> flops;
  for (const auto& [stage, record] : stages.items()) {
    if (record["flops"].get<double>() > 0) flops[stage] = record["flops"].get<double>();
  }
  return flops;
}

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
  const std::map<std::string, double> want_flops = StageFlops(root / "embedded");
  for (const char* stage : {"sft", "rollout", "eval", "reference", "update"}) {
    EXPECT_TRUE(want_flops.contains(stage)) << stage;
  }

  for (int actors : {1, 2, 3}) {
    const std::string name = "launched" + std::to_string(actors);
    job.mutable_deployment()->mutable_actor()->set_count(actors);
    testing_util::RunTrellis(root, "launch", name, job);
    EXPECT_EQ(StepRewards(root / name), want) << actors << " actors";
    const std::map<std::string, double> flops = StageFlops(root / name);
    EXPECT_EQ(flops.size(), want_flops.size()) << actors << " actors";
    for (const auto& [stage, f] : want_flops) {
      EXPECT_NEAR(flops.contains(stage) ? flops.at(stage) : 0, f, 1e-9 * f)
          << stage << ", " << actors << " actors";
    }
  }
}

}  // namespace
}  // namespace trellis
