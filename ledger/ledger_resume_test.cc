// Resuming a ledger: the kept prefix of ledger.jsonl and the run totals.

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gmock/gmock.h"
#include "env/testing/fake_env.h"
#include "gtest/gtest.h"
#include "ledger/ledger.h"
#include "ledger/testing/jsonl.h"

namespace trellis::ledger {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

using env::testing::FakeEnv;
using testing_util::ReadJsonLines;

// Steps first..last of a run with a fake clock: 1 s of rollout each, two
// rewards clipped, every odd step's update skipped.
void RunSteps(Ledger& ledger, FakeEnv& clock, int64_t first, int64_t last) {
  for (int64_t step = first; step <= last; ++step) {
    ledger.BeginStep(step);
    {
      auto span = ledger.Begin(Stage::kRollout, "actor-0");
      clock.Advance(absl::Seconds(1));
    }
    StepCounts counts;
    counts.step = step;
    counts.samples_generated = 8;
    counts.mean_reward = 0.25 * step;
    counts.samples_reward_clipped = 2;
    counts.steps_skipped_nonfinite = step % 2;
    ledger.EndStep(counts);
  }
}

TEST(LedgerResumeTest, DropsRecordsPastTheStepAndTornLastLine) {
  const std::string path = ::testing::TempDir() + "/resume_ledger.jsonl";
  FakeEnv clock;
  {
    Ledger ledger(&clock);
    ASSERT_TRUE(ledger.Open(path).ok());
    ledger.RecordEval("before", EvalMetrics{4, 0.5, 0.5});
    RunSteps(ledger, clock, 0, 2);
  }
  {
    std::ofstream torn(path, std::ios::app);
    torn << "{\"type\":\"span\",\"st";
  }
  Ledger ledger(&clock);
  int64_t dropped = 0;
  ASSERT_TRUE(ledger.OpenForResume(path, 1, &dropped).ok());
  EXPECT_EQ(dropped, 3);  // step 2's span and step record, the torn line
  RunSteps(ledger, clock, 2, 2);
  std::vector<int64_t> steps;
  for (const json& r : ReadJsonLines(path)) {
    EXPECT_LE(r["step"].get<int64_t>(), 2);
    if (r["type"] == "step") steps.push_back(r["step"].get<int64_t>());
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{0, 1, 2}));
}

TEST(LedgerResumeTest, BrokenRecordBeforeTheLastLineIsDataLoss) {
  const std::string path = ::testing::TempDir() + "/broken_ledger.jsonl";
  {
    std::ofstream out(path);
    out << "{\"type\":\"eval\",\"step\":-1}\nnot json\n{\"type\":\"eval\",\"step\":-1}\n";
  }
  Ledger ledger;
  absl::Status s = ledger.OpenForResume(path, 5);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr(path + ":2"));
}

TEST(LedgerResumeTest, ImportedTotalsContinueTheRun) {
  FakeEnv clock;
  Ledger first(&clock);
  first.RecordEval("before", EvalMetrics{4, 0.5, 0.5});
  first.RecordObject("learner-0", Object::kParameters, 1000, Stage::kUpdate);
  RunSteps(first, clock, 0, 1);
  const std::string state = first.ExportState();

  Ledger second(&clock);
  ASSERT_TRUE(second.ImportState(state).ok());
  RunSteps(second, clock, 2, 2);
  EXPECT_DOUBLE_EQ(second.stage_seconds(Stage::kRollout), 3.0);
  EXPECT_EQ(second.object_peak_bytes(Object::kParameters), 1000);
  const std::string path = ::testing::TempDir() + "/resume_summary.json";
  ASSERT_TRUE(second.WriteSummary(path).ok());
  std::ifstream in(path);
  const json summary = json::parse(in);
  EXPECT_EQ(summary["steps"], 3);
  EXPECT_EQ(summary["samples"]["generated"], 24);
  // The reward rule's and the learner's skip counts, summed over the resume.
  EXPECT_EQ(summary["samples"]["reward_clipped"], 6);
  EXPECT_EQ(summary["steps_skipped"]["nonfinite"], 1);
  EXPECT_EQ(summary["final_step"]["steps_skipped_nonfinite"], 0);
  EXPECT_EQ(summary["eval"]["before"]["accuracy"], 0.5);
  EXPECT_EQ(summary["final_step"]["step"], 2);

  absl::Status s = second.ImportState("{\"wall_seconds\": 1}");
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("steps"));
}

}  // namespace
}  // namespace trellis::ledger
