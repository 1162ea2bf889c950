#include "ledger/record_scalars.h"

#include <map>
#include <string>
#include <vector>

#include "env/testing/fake_env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ledger/ledger.h"

namespace trellis::ledger {
namespace {

using ::testing::HasSubstr;

std::map<std::string, double> ByTag(const ScalarPoint& point) {
  std::map<std::string, double> tags;
  for (const Scalar& s : point.scalars) tags[s.tag] = s.value;
  return tags;
}

// A ledger on a hand-moved clock whose records feed RecordScalars.
class RecordScalarsTest : public ::testing::Test {
 protected:
  RecordScalarsTest() {
    ledger_.AddRecordObserver([this](std::string_view record) {
      absl::StatusOr<std::optional<ScalarPoint>> point = scalars_.Add(record);
      ASSERT_TRUE(point.ok()) << point.status();
      if (point->has_value()) points_.push_back(**point);
    });
  }

  env::testing::FakeEnv clock_;
  Ledger ledger_{&clock_};
  RecordScalars scalars_;
  std::vector<ScalarPoint> points_;
};

TEST_F(RecordScalarsTest, AStepGivesEveryNumberOfItsRecordAndEachRolesMemory) {
  ledger_.RecordObject("learner-0", Object::kParameters, 1000, Stage::kLoad);
  ledger_.BeginStep(0);
  {
    auto span = ledger_.Begin(Stage::kRollout, "actor-0");
    ledger_.RecordObject("actor-0", Object::kKvCache, 4096, Stage::kRollout);
    clock_.Advance(absl::Seconds(3));
  }
  ledger_.RecordObject("actor-0", Object::kKvCache, 0, Stage::kRollout);
  StepCounts counts;
  counts.step = 0;
  counts.samples_generated = 16;
  counts.samples_effective = 12;
  counts.mean_reward = 0.5;
  counts.kl = 0.25;
  counts.loss = -1.5;
  ledger_.EndStep(counts);

  ASSERT_EQ(points_.size(), 1u);
  EXPECT_EQ(points_[0].step, 0);
  const std::map<std::string, double> tags = ByTag(points_[0]);
  EXPECT_EQ(tags.at("mean_reward"), 0.5);
  EXPECT_EQ(tags.at("kl"), 0.25);
  EXPECT_EQ(tags.at("loss"), -1.5);
  EXPECT_EQ(tags.at("effective_sample_rate"), 0.75);
  EXPECT_EQ(tags.at("stage_seconds/rollout"), 3.0);
  EXPECT_EQ(tags.at("step_seconds"), 3.0);
  EXPECT_EQ(tags.at("role_busy_seconds/actor-0"), 3.0);
  EXPECT_EQ(tags.at("prompt_account/reconciles"), 1.0);
  // The actor's KV cache at its height; the learner reported nothing in
  // the step and holds its parameters.
  EXPECT_EQ(tags.at("memory_peak_bytes/actor-0"), 4096.0);
  EXPECT_EQ(tags.at("memory_peak_bytes/learner-0"), 1000.0);
  EXPECT_FALSE(tags.contains("step"));
  EXPECT_FALSE(tags.contains("time"));

  // The next step starts from what the roles hold at its start.
  ledger_.BeginStep(1);
  ledger_.RecordObject("learner-0", Object::kParameters, 500, Stage::kUpdate);
  counts.step = 1;
  ledger_.EndStep(counts);
  ASSERT_EQ(points_.size(), 2u);
  EXPECT_EQ(ByTag(points_[1]).at("memory_peak_bytes/learner-0"), 1000.0);
  EXPECT_EQ(ByTag(points_[1]).at("memory_peak_bytes/actor-0"), 0.0);
}

TEST_F(RecordScalarsTest, AnEvalCountsTheStepsTrainedBeforeIt) {
  EvalMetrics before;
  before.prompts = 8;
  before.accuracy = 0.25;
  before.unscored = 0;
  ledger_.RecordEval("before", before);
  ledger_.BeginStep(3);
  ledger_.RecordEval("step_4", before);
  ASSERT_EQ(points_.size(), 2u);
  EXPECT_EQ(points_[0].step, 0);
  EXPECT_EQ(points_[1].step, 4);
  const std::map<std::string, double> tags = ByTag(points_[0]);
  EXPECT_EQ(tags.at("eval/accuracy"), 0.25);
  EXPECT_EQ(tags.at("eval/prompts"), 8.0);
  EXPECT_EQ(tags.at("eval/complete"), 1.0);
  EXPECT_FALSE(tags.contains("eval/label"));
}

TEST(AppendScalarsTest, FlattensObjectsAndWritesOddCharactersAsUnderscores) {
  const nlohmann::json j = nlohmann::json::parse(
      R"({"device_memory": {"cuda:0": {"peak_allocated_bytes": 7}}, "name": "x",
          "ids": [1, 2], "ok": false, "rate": 0.5})");
  std::vector<Scalar> out;
  AppendScalars(j, "summary/", &out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].tag, "summary/device_memory/cuda_0/peak_allocated_bytes");
  EXPECT_EQ(out[0].value, 7.0);
  EXPECT_EQ(out[1].tag, "summary/ok");
  EXPECT_EQ(out[1].value, 0.0);
  EXPECT_EQ(out[2].tag, "summary/rate");
}

TEST(RecordScalarsMalformedTest, IsAnErrorQuotingTheRecord) {
  RecordScalars scalars;
  absl::StatusOr<std::optional<ScalarPoint>> point = scalars.Add("[1, 2]");
  EXPECT_EQ(point.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(point.status().message(), HasSubstr("[1, 2]"));
}

// Several observers each get every record, in the order they were added;
// a removed one gets no more.
TEST(LedgerObserversTest, EveryObserverGetsEveryRecordUntilRemoved) {
  env::testing::FakeEnv clock;
  Ledger ledger(&clock);
  std::vector<std::string> seen;
  const Ledger::ObserverId a =
      ledger.AddRecordObserver([&seen](std::string_view) { seen.push_back("a"); });
  ledger.AddRecordObserver([&seen](std::string_view) { seen.push_back("b"); });
  ledger.RecordEval("before", {});
  EXPECT_EQ(seen, (std::vector<std::string>{"a", "b"}));
  ledger.RemoveRecordObserver(a);
  ledger.RemoveRecordObserver(a);
  ledger.RecordEval("after", {});
  EXPECT_EQ(seen, (std::vector<std::string>{"a", "b", "b"}));
}

}  // namespace
}  // namespace trellis::ledger
