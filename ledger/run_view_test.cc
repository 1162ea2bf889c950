#include "ledger/run_view.h"

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "gmock/gmock.h"
#include "env/testing/fake_env.h"
#include "gtest/gtest.h"
#include "ledger/ledger.h"

namespace trellis::ledger {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

// A ledger on a hand-moved clock whose records feed a RunView, as the
// scheduler's dashboard does.
class RunViewTest : public ::testing::Test {
 protected:
  RunViewTest() {
    ledger_.AddRecordObserver([this](std::string_view record) {
      ASSERT_TRUE(view_.Add(record).ok()) << record;
    });
  }

  // One step: a 3 s rollout on actor-0, 1 s verify, 2 s update on
  // learner-0, a handoff, a verifier request, objects.
  void Step(int64_t step) {
    ledger_.BeginStep(step);
    {
      auto span = ledger_.Begin(Stage::kRollout, "actor-0");
      ledger_.RecordObject("actor-0", Object::kKvCache, 4096, Stage::kRollout);
      Tick(3);
    }
    ledger_.RecordObject("actor-0", Object::kKvCache, 0, Stage::kRollout);
    {
      auto span = ledger_.Begin(Stage::kVerify, "verifier-0");
      Tick(1);
    }
    v1::VerifierStats verifier;
    verifier.set_verifier("numeric");
    verifier.set_items(16);
    verifier.set_wait_seconds(1.0);
    ledger_.RecordVerifier(verifier);
    {
      auto span = ledger_.Begin(Stage::kUpdate, "learner-0");
      ledger_.RecordObject("learner-0", Object::kParameters, 1000, Stage::kUpdate);
      ledger_.RecordObject("learner-0", Object::kOptimizerState, 2000, Stage::kUpdate);
      Tick(2);
    }
    v1::WeightSyncStats handoff;
    handoff.set_bytes(1000);
    handoff.set_gather_seconds(0.002);
    handoff.set_transfer_seconds(0.5);
    handoff.set_load_seconds(0.004);
    ledger_.RecordHandoff("actor-0", handoff);
    StepCounts counts;
    counts.step = step;
    counts.samples_generated = 16;
    counts.samples_effective = 12;
    counts.samples_zero_variance = 4;
    counts.generated_tokens = 300;
    counts.trained_tokens = 200;
    counts.mean_reward = 0.5;
    counts.rollout_concurrency = 8 + step;
    ledger_.EndStep(counts);
  }

  // Moves the fake clock by `seconds`.
  void Tick(double seconds) { clock_.Advance(absl::Seconds(seconds)); }

  env::testing::FakeEnv clock_;
  RunView view_;
  Ledger ledger_{&clock_};
};

TEST_F(RunViewTest, ViewHasStepTableTimelineAndMemorySeries) {
  Step(0);
  Step(1);
  const json v = json::parse(view_.ViewJson());
  EXPECT_EQ(v["current_step"], 1);
  EXPECT_EQ(v["steps_done"], 2);
  ASSERT_EQ(v["steps"].size(), 2u);
  EXPECT_EQ(v["steps"][1]["step"], 1);
  EXPECT_DOUBLE_EQ(v["steps"][1]["step_seconds"].get<double>(), 6.0);
  EXPECT_DOUBLE_EQ(v["steps"][1]["rollout_update_ratio"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(v["steps"][1]["effective_sample_rate"].get<double>(), 0.75);
  // Step 1 ended 12 s after the ledger began.
  EXPECT_DOUBLE_EQ(v["steps"][1]["time"].get<double>(), 12.0);

  // Timeline: [start, seconds, stage, role, step]; step 1's rollout began at 6 s.
  ASSERT_EQ(v["spans"].size(), 6u);
  const json& rollout = v["spans"][3];
  EXPECT_DOUBLE_EQ(rollout[0].get<double>(), 6.0);
  EXPECT_DOUBLE_EQ(rollout[1].get<double>(), 3.0);
  EXPECT_EQ(v["stages"][rollout[2].get<int>()], "rollout");
  EXPECT_EQ(v["roles"][rollout[3].get<int>()], "actor-0");
  EXPECT_EQ(rollout[4], 1);

  // Memory: [time, step, bytes of each object in "objects" order].
  const json& memory = v["memory"];
  const json& objects = memory["objects"];
  const int kv = std::find(objects.begin(), objects.end(), "kv_cache") - objects.begin();
  const int params = std::find(objects.begin(), objects.end(), "parameters") - objects.begin();
  ASSERT_EQ(memory["series"].size(), 8u);  // 4 object records per step.
  EXPECT_EQ(memory["series"][0][2 + kv], 4096);
  EXPECT_EQ(memory["series"][1][2 + kv], 0);
  EXPECT_DOUBLE_EQ(memory["series"][1][0].get<double>(), 3.0);
  EXPECT_EQ(memory["series"][7][2 + params], 1000);
  EXPECT_EQ(memory["peak_bytes"][kv], 4096);
  EXPECT_EQ(memory["current_bytes"][kv], 0);
  EXPECT_EQ(v["verifiers"]["numeric"]["requests"], 2);
  EXPECT_EQ(v["samples"]["zero_variance"], 8);
  EXPECT_EQ(v["handoffs"].size(), 2u);
}

TEST_F(RunViewTest, MetricsCoverStagesSamplesHandoffsAndMemory) {
  Step(0);
  Step(1);
  PrometheusText out;
  view_.WriteMetrics(out);
  const std::string& text = out.text();
  EXPECT_THAT(text, HasSubstr("# TYPE trellis_stage_seconds histogram\n"));
  EXPECT_THAT(text, HasSubstr("trellis_stage_seconds_count{stage=\"rollout\",role=\"actor-0\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("trellis_stage_seconds_sum{stage=\"update\",role=\"learner-0\"} 4\n"));
  EXPECT_THAT(text, HasSubstr(
      "trellis_stage_seconds_bucket{stage=\"rollout\",role=\"actor-0\",le=\"2.048\"} 0\n"));
  EXPECT_THAT(text, HasSubstr(
      "trellis_stage_seconds_bucket{stage=\"rollout\",role=\"actor-0\",le=\"4.096\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("trellis_step 1\n"));
  EXPECT_THAT(text, HasSubstr("trellis_steps_total 2\n"));
  EXPECT_THAT(text, HasSubstr("trellis_step_seconds_sum 12\n"));
  EXPECT_THAT(text, HasSubstr("trellis_rollout_update_ratio 1.5\n"));
  EXPECT_THAT(text, HasSubstr("trellis_effective_sample_rate 0.75\n"));
  EXPECT_THAT(text, HasSubstr("trellis_rollout_concurrency 9\n"));
  // 3 s of the 6 s step on the actor; the roles' 18 s, 6 s busy.
  EXPECT_THAT(text, HasSubstr("trellis_role_busy_fraction{role=\"actor-0\"} 0.5\n"));
  EXPECT_THAT(text, HasSubstr("trellis_bubble_fraction 0.666"));
  EXPECT_THAT(text, HasSubstr("trellis_samples_generated_total 32\n"));
  EXPECT_THAT(text, HasSubstr("trellis_samples_lost_total{reason=\"zero_variance\"} 8\n"));
  EXPECT_THAT(text, HasSubstr("trellis_samples_lost_total{reason=\"timeout\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("trellis_verifier_wait_seconds_count{verifier=\"numeric\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("trellis_handoff_seconds_sum{phase=\"transfer\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("trellis_handoff_bytes_total 2000\n"));
  EXPECT_THAT(text, HasSubstr("trellis_tokens_per_second{kind=\"generated\"} 100\n"));
  EXPECT_THAT(text, HasSubstr("trellis_tokens_per_second{kind=\"trained\"} 100\n"));
  EXPECT_THAT(text,
              HasSubstr("trellis_memory_bytes{role=\"learner-0\",object=\"optimizer_state\"} 2000\n"));
  EXPECT_THAT(text, HasSubstr("trellis_memory_bytes{role=\"actor-0\",object=\"kv_cache\"} 0\n"));
  EXPECT_THAT(text,
              HasSubstr("trellis_memory_peak_bytes{role=\"actor-0\",object=\"kv_cache\"} 4096\n"));

  // A worker process's scope: its spans and objects, no job-wide families.
  PrometheusText process;
  view_.WriteMetrics(process, RunView::Scope::kProcess);
  EXPECT_THAT(process.text(),
              HasSubstr("trellis_memory_bytes{role=\"learner-0\",object=\"parameters\"} 1000\n"));
  EXPECT_THAT(process.text(), HasSubstr("# TYPE trellis_stage_seconds histogram\n"));
  EXPECT_THAT(process.text(), Not(HasSubstr("trellis_steps_total")));
  EXPECT_THAT(process.text(), Not(HasSubstr("trellis_samples_lost_total")));
}

TEST(RunViewFileTest, ReadsLedgerFileAndNamesTheBadLine) {
  const std::string path = ::testing::TempDir() + "/run_view_ledger.jsonl";
  {
    std::ofstream out(path);
    out << R"({"type":"span","step":-1,"stage":"load","role":"scheduler","start":0,"seconds":0.5})"
        << "\n"
        << R"({"type":"eval","step":-1,"label":"before","prompts":4,"accuracy":0.25})" << "\n";
  }
  RunView view;
  ASSERT_TRUE(view.AddFile(path).ok());
  const json v = json::parse(view.ViewJson());
  EXPECT_EQ(v["spans"].size(), 1u);
  EXPECT_EQ(v["evals"][0]["label"], "before");
  EXPECT_EQ(view.current_step(), -1);

  { std::ofstream(path, std::ios::app) << "{\"step\": 3}\n"; }
  RunView bad;
  const absl::Status s = bad.AddFile(path);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("run_view_ledger.jsonl:3: "));
  EXPECT_EQ(RunView().AddFile(path + ".missing").code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace trellis::ledger
