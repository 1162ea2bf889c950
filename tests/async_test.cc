// End-to-end: the asynchronous pipeline (job.async). max_staleness 0 gives
// the synchronous loop's per-step rewards and bit-identical final weights;
// stale samples train with decoupled PPO, within their staleness bound;
// every prompt drawn is trained, dropped with a reason or in flight at
// every step; and a run killed mid-step and resumed (embedded and
// launched) trains the prompts of the stream the synchronous run trains,
// each once, in the same steps.

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "config/job_config.h"
#include "gtest/gtest.h"
#include "tests/tiny_job.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing_util::JobRun;
using testing_util::RunTinyJob;
using testing_util::Slurp;

constexpr int kSteps = 6;

v1::JobConfig Job(bool async, int max_staleness) {
  v1::JobConfig job = testing_util::VaryingRewardsJob(kSteps);
  job.mutable_deployment()->mutable_actor()->set_count(1);
  job.mutable_async()->set_enabled(async);
  job.mutable_async()->set_max_staleness(max_staleness);
  return job;
}

// Every step's trained prompt ids, in step order.
std::vector<std::vector<uint64_t>> PromptIds(const std::vector<json>& steps) {
  std::vector<std::vector<uint64_t>> ids;
  for (const json& s : steps) ids.push_back(s["prompt_ids"].get<std::vector<uint64_t>>());
  return ids;
}

std::vector<json> Steps(const fs::path& dir) {
  std::vector<json> steps;
  for (const auto& [step, record] : testing_util::StepRecords(dir)) steps.push_back(record);
  return steps;
}

// Every step's account reconciles; none is in flight after the last.
void ExpectAccountsReconcile(const std::vector<json>& steps) {
  ASSERT_FALSE(steps.empty());
  for (const json& s : steps) {
    const json& a = s["prompt_account"];
    EXPECT_TRUE(a["reconciles"].get<bool>()) << s.dump();
    int64_t dropped = 0;
    for (const auto& [reason, n] : a["dropped"].items()) dropped += n.get<int64_t>();
    EXPECT_EQ(a["drawn"].get<int64_t>(),
              a["trained"].get<int64_t>() + dropped + a["in_flight"].get<int64_t>());
  }
  EXPECT_EQ(steps.back()["prompt_account"]["in_flight"], 0);
}

class AsyncTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { sync_ = new JobRun(RunTinyJob("async_sync", Job(false, 0))); }
  static void TearDownTestSuite() { delete sync_; }
  static JobRun* sync_;
};
JobRun* AsyncTest::sync_ = nullptr;

TEST_F(AsyncTest, StalenessZeroMatchesTheSynchronousLoop) {
  const JobRun async = RunTinyJob("async_zero", Job(true, 0));
  ASSERT_EQ(sync_->steps.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(async.steps.size(), sync_->steps.size());
  // Not vacuous: the runs trained on real signal.
  EXPECT_GT(sync_->summary["samples"]["effective"].get<int64_t>(), 0);
  for (size_t i = 0; i < sync_->steps.size(); ++i) {
    EXPECT_EQ(async.steps[i]["mean_reward"].get<double>(),
              sync_->steps[i]["mean_reward"].get<double>())
        << "step " << i;
    EXPECT_EQ(async.steps[i]["loss"].get<double>(), sync_->steps[i]["loss"].get<double>());
    // Every sample trained on the version that generated it.
    EXPECT_EQ(async.steps[i]["staleness"].size(), 1u) << async.steps[i]["staleness"].dump();
  }
  const std::string weights = Slurp(sync_->dir / "policy.safetensors");
  ASSERT_FALSE(weights.empty());
  EXPECT_TRUE(weights == Slurp(async.dir / "policy.safetensors")) << "final weights differ";
  EXPECT_EQ(async.summary["eval"], sync_->summary["eval"]);
  ExpectAccountsReconcile(async.steps);
}

TEST_F(AsyncTest, StaleSamplesTrainWithinTheBoundWithDecoupledPpo) {
  const JobRun async = RunTinyJob("async_two", Job(true, 2));
  ASSERT_EQ(async.steps.size(), static_cast<size_t>(kSteps));
  int64_t stale = 0;
  for (const json& s : async.steps) {
    const auto hist = s["staleness"].get<std::vector<int64_t>>();
    EXPECT_LE(hist.size(), 3u) << "a sample trained more than 2 versions late";
    for (size_t k = 1; k < hist.size(); ++k) stale += hist[k];
    if (hist.size() > 1) EXPECT_GT(s["logprob_gap"].get<double>(), 0) << s.dump();
  }
  EXPECT_GT(stale, 0) << "the actors never ran ahead";
  ExpectAccountsReconcile(async.steps);
  // The same prompts in the same steps as the synchronous loop.
  EXPECT_EQ(PromptIds(async.steps), PromptIds(sync_->steps));
}

// DAPO's dynamic sampling runs its extra rounds ahead too; the groups it
// leaves out are dropped with their reason.
TEST_F(AsyncTest, DynamicSamplingRunsAheadAndAccountsForWhatItLeavesOut) {
  v1::JobConfig job = Job(true, 1);
  job.mutable_grpo()->mutable_dapo()->set_dynamic_sampling(true);
  job.mutable_grpo()->mutable_dapo()->set_max_sampling_rounds(3);
  const JobRun run = RunTinyJob("async_dapo", job);
  ASSERT_EQ(run.steps.size(), static_cast<size_t>(kSteps));
  ExpectAccountsReconcile(run.steps);
  const json& account = run.steps.back()["prompt_account"];
  EXPECT_EQ(account["drawn"].get<int64_t>(), run.summary["prompt_account"]["drawn"]);
  EXPECT_GT(account["dropped"]["dynamic_sampling"].get<int64_t>(), 0) << account.dump();
}

// PPO (its critic beside the policy) and online DPO run ahead too, within
// the bound, and account for every prompt.
TEST_F(AsyncTest, PpoAndOnlineDpoRunAheadWithinTheBound) {
  for (const char* algorithm : {"ppo", "online_dpo"}) {
    v1::JobConfig job = Job(true, 1);
    job.set_algorithm(algorithm);
    job.mutable_dpo()->set_steps(kSteps);
    job.mutable_dpo()->set_batch_size(job.grpo().prompts_per_step());
    const JobRun run = RunTinyJob(std::string("async_") + algorithm, job);
    ASSERT_EQ(run.steps.size(), static_cast<size_t>(kSteps)) << algorithm;
    int64_t stale = 0;
    for (const json& s : run.steps) {
      const auto hist = s["staleness"].get<std::vector<int64_t>>();
      EXPECT_LE(hist.size(), 2u) << algorithm << ": a sample trained more than 1 version late";
      for (size_t k = 1; k < hist.size(); ++k) stale += hist[k];
    }
    EXPECT_GT(stale, 0) << algorithm << ": the actors never ran ahead";
    ExpectAccountsReconcile(run.steps);
  }
}

// `trellis COMMAND` of an asynchronous job, SIGKILLed as soon as its step-3
// checkpoint is in place (the actors were sampling ahead), then resumed:
// every step trained the prompts the synchronous run trained in it, none
// lost and none twice, and the account reconciles.
void KillAndResume(const std::string& command, const std::string& name,
                   const std::vector<std::vector<uint64_t>>& want) {
  v1::JobConfig job = Job(true, 1);
  job.mutable_runtime()->set_checkpoint_every(3);
  const fs::path dir =
      testing_util::KillAndResume(command, fs::path(testing::TempDir()) / name, job, 3);
  const std::vector<json> steps = Steps(dir);
  ASSERT_EQ(steps.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(PromptIds(steps), want);
  ExpectAccountsReconcile(steps);
  const json summary = json::parse(Slurp(dir / "summary.json"));
  EXPECT_TRUE(summary["prompt_account"]["reconciles"].get<bool>());
  EXPECT_EQ(summary["prompt_account"]["drawn"], steps.back()["prompt_account"]["drawn"]);
}

TEST_F(AsyncTest, KilledAndResumedRunTrainsEveryPromptOnce) {
  KillAndResume("run", "async_killed", PromptIds(sync_->steps));
}

TEST_F(AsyncTest, KilledAndResumedLaunchTrainsEveryPromptOnce) {
  KillAndResume("launch", "async_killed_launch", PromptIds(sync_->steps));
}

}  // namespace
}  // namespace trellis
