// End-to-end: partial rollout (job.async.partial_rollout) on the long-tail
// data (examples/data/long_tail_train.jsonl: a tenth of the prompts make
// responses ten times as long). A step trains the first groups to finish;
// the others are carried to the next step's rollout (CONTINUE: their tokens
// go on on the newer weights; REQUEUE: they start afresh). Every trained
// token is within the staleness bound, every prompt drawn is trained once
// or dropped with a reason, embedded, launched and across a kill and
// resume.

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "config/job_config.h"
#include "gtest/gtest.h"
#include "tests/tiny_job.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing_util::JobRun;
using testing_util::RunTinyJob;

constexpr int kSteps = 8;
constexpr int kStaleness = 4;

v1::JobConfig Job(v1::AsyncConfig::PartialRollout mode) {
  v1::JobConfig job = testing_util::TinyJob();
  const std::string data = std::string(TRELLIS_SOURCE_DIR) + "/examples/data/";
  job.mutable_data()->set_train_path(data + "long_tail_train.jsonl");
  job.mutable_data()->set_eval_path(data + "long_tail_eval.jsonl");
  job.mutable_model()->set_max_seq_len(48);
  job.mutable_sampling()->set_max_new_tokens(36);
  job.mutable_grpo()->set_steps(kSteps);
  // Enough warm-up that the short answers end well before the long ones.
  job.mutable_sft()->set_steps(30);
  job.mutable_deployment()->mutable_actor()->set_count(1);
  job.mutable_async()->set_enabled(true);
  job.mutable_async()->set_max_staleness(kStaleness);
  job.mutable_async()->set_partial_rollout(mode);
  job.mutable_async()->set_rollout_overdraw(1.0);
  return job;
}

struct Totals {
  int64_t carried = 0;
  int64_t restarted = 0;
  int64_t discarded = 0;
  int64_t stale_tokens = 0;  // trained at least one version late
};

// Checks what every partial rollout run must hold and sums its counters:
// each step trains its batch, no token past the bound, the account
// reconciles at every step with nothing in flight after the last, and no
// prompt trained twice.
Totals Check(const std::vector<json>& steps, const v1::JobConfig& job) {
  Totals t;
  std::set<uint64_t> trained;
  int64_t trained_count = 0;
  EXPECT_EQ(steps.size(), static_cast<size_t>(kSteps));
  for (const json& s : steps) {
    EXPECT_EQ(s["prompts"].get<int64_t>(), job.grpo().prompts_per_step()) << s.dump();
    const auto lags = s["token_staleness"].get<std::vector<int64_t>>();
    EXPECT_LE(lags.size(), static_cast<size_t>(kStaleness + 1)) << "a token past the bound";
    for (size_t k = 1; k < lags.size(); ++k) t.stale_tokens += lags[k];
    t.carried += s["rollout_groups_carried"].get<int64_t>();
    t.restarted += s["rollout_groups_restarted"].get<int64_t>();
    t.discarded += s["rollout_tokens_discarded"].get<int64_t>();
    const json& a = s["prompt_account"];
    EXPECT_TRUE(a["reconciles"].get<bool>()) << s.dump();
    for (uint64_t id : s["prompt_ids"].get<std::vector<uint64_t>>()) {
      EXPECT_TRUE(trained.insert(id).second) << "prompt " << id << " trained twice";
      ++trained_count;
    }
  }
  if (steps.empty()) return t;
  const json& last = steps.back()["prompt_account"];
  EXPECT_EQ(last["in_flight"], 0);
  EXPECT_EQ(last["trained"].get<int64_t>(), trained_count);
  int64_t dropped = 0;
  for (const auto& [reason, n] : last["dropped"].items()) dropped += n.get<int64_t>();
  EXPECT_EQ(last["drawn"].get<int64_t>(), trained_count + dropped);
  return t;
}

TEST(PartialRollout, ContinueCarriesLongResponsesOnToNewerWeights) {
  const v1::JobConfig job = Job(v1::AsyncConfig::CONTINUE);
  const JobRun run = RunTinyJob("partial_continue", job);
  const Totals t = Check(run.steps, job);
  EXPECT_GT(t.carried, 0) << "no group was carried to a later step";
  EXPECT_GT(t.stale_tokens, 0) << "no token trained on newer weights than it was sampled on";
  // What the last step left in flight is dropped with its reason.
  EXPECT_GT(run.steps.back()["prompt_account"]["dropped"].value("in_flight_at_end", 0), 0);
}

TEST(PartialRollout, RequeueStartsUnfinishedGroupsAfresh) {
  const v1::JobConfig job = Job(v1::AsyncConfig::REQUEUE);
  const JobRun run = RunTinyJob("partial_requeue", job);
  const Totals t = Check(run.steps, job);
  EXPECT_GT(t.restarted, 0);
  EXPECT_GT(t.discarded, 0);
}

TEST(PartialRollout, LaunchedPoolOfTwoSplitsTheFinishCount) {
  v1::JobConfig job = Job(v1::AsyncConfig::CONTINUE);
  job.mutable_deployment()->mutable_actor()->set_count(2);
  const fs::path root = fs::path(testing::TempDir()) / "partial_launch";
  fs::remove_all(root);
  fs::create_directories(root);
  testing_util::WriteText(root / "job.yaml", config::ResolvedJobYaml(job));
  const int status = testing_util::Wait(testing_util::StartTrellis(
      {"launch", (root / "job.yaml").string(), "--out", (root / "run").string()},
      root / "launch.log"));
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << testing_util::Slurp(root / "launch.log");
  std::vector<json> steps;
  for (const auto& [step, record] : testing_util::StepRecords(root / "run")) steps.push_back(record);
  EXPECT_GT(Check(steps, job).carried, 0);
}

// `trellis COMMAND` killed right after its step-3 checkpoint, with groups
// in flight, and resumed: the groups in flight at the checkpoint start
// afresh in the resumed run, so every prompt is trained once or dropped
// with a reason.
void KillAndResume(const std::string& command, int actors) {
  v1::JobConfig job = Job(v1::AsyncConfig::CONTINUE);
  job.mutable_runtime()->set_checkpoint_every(3);
  job.mutable_deployment()->mutable_actor()->set_count(actors);
  const fs::path dir = testing_util::KillAndResume(
      command, fs::path(testing::TempDir()) / ("partial_killed_" + command), job, 3);
  const json state =
      json::parse(testing_util::Slurp(dir / "checkpoints" / "step_3" / "state.json"));
  EXPECT_FALSE(state["train_in_flight"].empty()) << "nothing was in flight at the checkpoint";
  std::vector<json> steps;
  for (const auto& [step, record] : testing_util::StepRecords(dir)) steps.push_back(record);
  Check(steps, job);
}

TEST(PartialRollout, KilledAndResumedRunTrainsEveryPromptOnce) { KillAndResume("run", 1); }

TEST(PartialRollout, KilledAndResumedLaunchTrainsEveryPromptOnce) { KillAndResume("launch", 2); }

}  // namespace
}  // namespace trellis
