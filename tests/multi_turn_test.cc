// Multi-turn jobs end to end (docs/multi-turn.md): the environment runs
// beside the loop (in the run's process embedded, in the scheduler's
// launched), and a job with the same seed gives the same per-step rewards
// either way; an environment written from docs/environment-protocol.md
// alone, in plain Python, drives a training job through the "subprocess"
// built-in; an asynchronous multi-turn run killed mid-step and resumed
// replays the episodes in flight: it trains what an uninterrupted run
// trains, step for step; PPO trains on episodes too. Every role's memory
// peak reconciles with the objects reported to within 1%.

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/job_config.h"
#include "gtest/gtest.h"
#include "tests/tiny_job.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using testing_util::StepRewards;

constexpr int kSteps = 3;

// The tiny job (one-digit sums, a policy that answers in digits, sums from
// 10 up starting with "1") playing a guessing game of 0 or 1: a turn ends
// with the digit "1", a guess of 1, which wins for half the episodes' seeds;
// answers without a "1" end their episode unrewarded.
v1::JobConfig GuessJob(const std::string& name) {
  v1::JobConfig job = testing_util::VaryingRewardsJob(kSteps);
  v1::EnvironmentConfig* env = job.mutable_environment();
  env->set_name(name);
  env->set_turn_stop("1");
  env->set_max_turns(3);
  env->set_max_turn_tokens(3);
  env->set_options_json(R"({"low": 0, "high": 1})");
  return job;
}

// The "environment" records of a run, in order.
std::vector<nlohmann::json> EnvironmentRecords(const fs::path& dir) {
  std::vector<nlohmann::json> records;
  std::ifstream in(dir / "ledger.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!record.is_discarded() && record["type"] == "environment") records.push_back(record);
  }
  return records;
}

// Every role's peak in the run's summary is explained by the objects the
// roles reported to within 1% (a multi-turn rollout's span holds several
// Generate calls, each with its own KV cache and workspace).
void ExpectMemoryReconciles(const fs::path& dir) {
  std::ifstream in(dir / "summary.json");
  const nlohmann::json peaks = nlohmann::json::parse(in)["memory"]["role_peaks"];
  ASSERT_FALSE(peaks.empty()) << dir;
  for (const auto& [role, peak] : peaks.items()) {
    EXPECT_LE(std::abs(peak["unattributed_fraction"].get<double>()), 0.01)
        << role << " at " << peak["stage"] << ": " << peak.dump();
  }
}

fs::path FreshRoot(const std::string& name) {
  const fs::path root = fs::path(::testing::TempDir()) / (name + "_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  return root;
}

TEST(MultiTurnTest, LaunchedAndEmbeddedGiveTheSameRewards) {
  const fs::path root = FreshRoot("multi_turn_test");
  v1::JobConfig job = GuessJob("guess_number");
  testing_util::RunTrellis(root, "run", "embedded", job);
  const std::map<int64_t, double> want = StepRewards(root / "embedded");
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));
  double total = 0;
  for (const auto& [step, reward] : want) total += reward;
  EXPECT_GT(total, 0) << "no episode won: equal rewards would show nothing";

  const std::vector<nlohmann::json> records = EnvironmentRecords(root / "embedded");
  ASSERT_EQ(records.size(), static_cast<size_t>(kSteps));
  int64_t turns = 0;
  for (const nlohmann::json& r : records) {
    EXPECT_EQ(r["environment"], "guess_number");
    EXPECT_EQ(r["episodes"].get<int64_t>(),
              job.grpo().prompts_per_step() * job.grpo().responses_per_prompt());
    turns += r["turns_max"].get<int64_t>();
  }
  EXPECT_GT(turns, 0) << "no episode took a turn: the game was never played";
  ExpectMemoryReconciles(root / "embedded");

  job.mutable_deployment()->mutable_actor()->set_count(2);
  testing_util::RunTrellis(root, "launch", "launched", job);
  EXPECT_EQ(StepRewards(root / "launched"), want);
  EXPECT_EQ(EnvironmentRecords(root / "launched").size(), static_cast<size_t>(kSteps));
}

TEST(MultiTurnTest, AnEnvironmentWrittenFromTheProtocolDocumentDrivesAJob) {
  const fs::path root = FreshRoot("multi_turn_doc_test");
  v1::JobConfig job = GuessJob("subprocess");
  job.mutable_environment()->add_command(TRELLIS_SOURCE_DIR
                                         "/environment/python/from_doc_environment.py");
  testing_util::RunTrellis(root, "run", "doc", job);
  EXPECT_EQ(StepRewards(root / "doc").size(), static_cast<size_t>(kSteps));
  const std::vector<nlohmann::json> records = EnvironmentRecords(root / "doc");
  ASSERT_EQ(records.size(), static_cast<size_t>(kSteps));
  int64_t turns = 0;
  for (const nlohmann::json& r : records) {
    EXPECT_EQ(r["environment"], "subprocess");
    EXPECT_TRUE(r["errors_by_reason"].empty()) << r.dump();
    turns += r["turns_max"].get<int64_t>();
  }
  EXPECT_GT(turns, 0) << "no episode took a turn: the plugin was never stepped";
}

TEST(MultiTurnTest, KilledAndResumedAsynchronousRunReplaysTheEpisodesInFlight) {
  const fs::path root = FreshRoot("multi_turn_resume_test");
  v1::JobConfig job = GuessJob("guess_number");
  job.mutable_grpo()->set_steps(6);
  job.mutable_async()->set_enabled(true);
  job.mutable_async()->set_max_staleness(1);
  job.mutable_runtime()->set_checkpoint_every(3);
  testing_util::RunTrellis(root, "run", "whole", job);
  const std::map<int64_t, nlohmann::json> want = testing_util::StepRecords(root / "whole");
  ASSERT_EQ(want.size(), 6u);
  const fs::path dir = testing_util::KillAndResume("run", root / "killed", job, 3);
  const std::map<int64_t, nlohmann::json> got = testing_util::StepRecords(dir);
  ASSERT_EQ(got.size(), 6u);
  for (const auto& [step, record] : want) {
    EXPECT_EQ(got.at(step)["prompt_ids"], record["prompt_ids"]) << "step " << step;
    EXPECT_EQ(got.at(step)["mean_reward"], record["mean_reward"]) << "step " << step;
  }
  EXPECT_TRUE(got.at(5)["prompt_account"]["reconciles"].get<bool>());
  EXPECT_EQ(got.at(5)["prompt_account"]["in_flight"], 0);
}

// PPO (a separate critic, GAE over the policy's tokens) trains on episodes
// as the GRPO family does: the run completes with one environment record a
// step and finite losses.
TEST(MultiTurnTest, PpoTrainsOnEpisodes) {
  const fs::path root = FreshRoot("multi_turn_ppo_test");
  v1::JobConfig job = GuessJob("guess_number");
  job.set_algorithm("ppo");
  job.mutable_ppo()->set_critic(v1::PpoConfig::SEPARATE);
  testing_util::RunTrellis(root, "run", "ppo", job);
  const std::map<int64_t, nlohmann::json> steps = testing_util::StepRecords(root / "ppo");
  ASSERT_EQ(steps.size(), static_cast<size_t>(kSteps));
  for (const auto& [step, record] : steps) {
    EXPECT_TRUE(std::isfinite(record["loss"].get<double>())) << "step " << step;
    EXPECT_TRUE(std::isfinite(record["value_loss"].get<double>())) << "step " << step;
    EXPECT_GT(record["trained_tokens"].get<int64_t>(), 0) << "step " << step;
  }
  EXPECT_EQ(EnvironmentRecords(root / "ppo").size(), static_cast<size_t>(kSteps));
  ExpectMemoryReconciles(root / "ppo");
}

}  // namespace
}  // namespace trellis
