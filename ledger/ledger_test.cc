#include "ledger/ledger.h"
#include "ledger/testing/fake_memory_source.h"
#include "ledger/testing/jsonl.h"

#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "env/testing/fake_env.h"
#include "gtest/gtest.h"
#include "ledger/memory_tracker.h"

namespace trellis::ledger {
namespace {

using nlohmann::json;
using testing_util::kMiB;

using testing_util::TempPath;

using testing_util::ReadJsonLines;

using testing_util::ReadJson;

// A clock the test moves by hand.
class LedgerTest : public ::testing::Test {
 protected:
  // Moves the fake clock by `seconds`.
  void Tick(double seconds) { clock_.Advance(absl::Seconds(seconds)); }

  env::testing::FakeEnv clock_;
  Ledger ledger_{&clock_};
};

TEST_F(LedgerTest, SpanMeasuresInjectedClockAndEndIsIdempotent) {
  Ledger::Span span = ledger_.Begin(Stage::kRollout, "actor");
  Tick(2.5);
  EXPECT_DOUBLE_EQ(span.End(), 2.5);
  Tick(10);
  EXPECT_DOUBLE_EQ(span.End(), 2.5);
  EXPECT_DOUBLE_EQ(ledger_.stage_seconds(Stage::kRollout), 2.5);
}

TEST_F(LedgerTest, SpanEndsAtScopeExitAndMovedFromSpanIsInert) {
  {
    Ledger::Span a = ledger_.Begin(Stage::kUpdate, "learner");
    Ledger::Span b = std::move(a);
    Tick(1.0);
  }
  EXPECT_DOUBLE_EQ(ledger_.stage_seconds(Stage::kUpdate), 1.0);
}

// The step's timeline: a role's overlapping spans count once, a span begun
// before the step counts from the step's start, and the bubble is the
// roles' unspanned share of the step.
TEST_F(LedgerTest, EndStepGivesEachRolesBusySecondsAndTheBubbleFraction) {
  Ledger::Span early = ledger_.Begin(Stage::kVerify, "verifier");
  Tick(1);
  ledger_.BeginStep(0);
  Tick(1);
  early.End();  // 1 s inside the step.
  Ledger::Span rollout = ledger_.Begin(Stage::kRollout, "actor");
  Tick(2);
  Ledger::Span verify = ledger_.Begin(Stage::kVerify, "actor");
  Tick(1);
  rollout.End();
  Tick(1);
  verify.End();  // The actor: busy 4 s, its two spans overlapping 1 s.
  {
    auto s = ledger_.Begin(Stage::kUpdate, "learner");
    Tick(2);
  }
  const StepMetrics m = ledger_.EndStep(StepCounts{});
  EXPECT_DOUBLE_EQ(m.step_seconds, 7);
  ASSERT_EQ(m.role_busy_seconds.size(), 3u);
  EXPECT_DOUBLE_EQ(m.role_busy_seconds.at("actor"), 4);
  EXPECT_DOUBLE_EQ(m.role_busy_seconds.at("learner"), 2);
  EXPECT_DOUBLE_EQ(m.role_busy_seconds.at("verifier"), 1);
  EXPECT_DOUBLE_EQ(m.bubble_fraction, 1 - 7.0 / 21.0);
  // A step with no spans has no bubble to report.
  EXPECT_DOUBLE_EQ(ledger_.EndStep(StepCounts{}).bubble_fraction, 0);
}

TEST_F(LedgerTest, EndStepDerivesMetrics) {
  ledger_.BeginStep(3);
  { auto s = ledger_.Begin(Stage::kRollout, "actor"); Tick(6); }
  { auto s = ledger_.Begin(Stage::kVerify, "verifier"); Tick(1.5); }
  { auto s = ledger_.Begin(Stage::kUpdate, "learner"); Tick(2); }
  v1::WeightSyncStats h;
  h.set_bytes(4000);
  h.set_gather_seconds(0.1);
  h.set_transfer_seconds(0.2);
  h.set_load_seconds(0.2);
  ledger_.RecordHandoff("learner", h);
  Tick(0.5);  // Unspanned time still counts toward the step's wall time.
  StepCounts c;
  c.step = 3;
  c.samples_generated = 16;
  c.samples_effective = 12;
  c.samples_zero_variance = 4;
  c.generated_tokens = 600;
  c.trained_tokens = 500;
  const StepMetrics m = ledger_.EndStep(c);
  EXPECT_DOUBLE_EQ(m.step_seconds, 10.0);
  EXPECT_DOUBLE_EQ(m.stage_seconds[static_cast<int>(Stage::kRollout)], 6);
  EXPECT_DOUBLE_EQ(m.rollout_update_ratio, 3.0);
  EXPECT_DOUBLE_EQ(m.verifier_wait_seconds, 1.5);
  EXPECT_DOUBLE_EQ(m.effective_sample_rate, 0.75);
  EXPECT_DOUBLE_EQ(m.generated_tokens_per_second, 100.0);
  EXPECT_DOUBLE_EQ(m.trained_tokens_per_second, 250.0);
  EXPECT_DOUBLE_EQ(m.handoff_seconds, 0.5);
  EXPECT_EQ(m.handoff_bytes, 4000);

  // The next step starts from zero.
  ledger_.BeginStep(4);
  StepCounts next;
  next.step = 4;
  const StepMetrics empty = ledger_.EndStep(next);
  EXPECT_DOUBLE_EQ(empty.rollout_update_ratio, 0);
  EXPECT_DOUBLE_EQ(empty.effective_sample_rate, 0);
  EXPECT_EQ(empty.handoff_bytes, 0);
}

TEST_F(LedgerTest, JsonlLinesParseAndCarryTheSchema) {
  const std::string path = TempPath("ledger_test.jsonl");
  ASSERT_TRUE(ledger_.Open(path).ok());
  ledger_.BeginStep(0);
  { auto s = ledger_.Begin(Stage::kRollout, "actor"); Tick(1); }
  ledger_.RecordObject("learner", Object::kParameters, 1000, Stage::kLoad);
  v1::WeightSyncStats h;
  h.set_version(1);
  h.set_bytes(2'000'000'000);
  h.set_transfer_seconds(1.0);
  ledger_.RecordHandoff("learner", h);
  StepCounts c;
  c.samples_generated = 4;
  ledger_.EndStep(c);
  ledger_.RecordEval("after", EvalMetrics{10, 0.5, 0.25});

  const std::vector<json> lines = ReadJsonLines(path);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0]["type"], "span");
  EXPECT_EQ(lines[0]["stage"], "rollout");
  EXPECT_EQ(lines[0]["role"], "actor");
  EXPECT_EQ(lines[0]["step"], 0);
  EXPECT_DOUBLE_EQ(lines[0]["start"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(lines[0]["seconds"].get<double>(), 1.0);
  EXPECT_TRUE(lines[0].contains("peak_bytes"));
  EXPECT_TRUE(lines[0].contains("live_bytes"));
  EXPECT_EQ(lines[1]["type"], "object");
  EXPECT_EQ(lines[1]["object"], "parameters");
  EXPECT_EQ(lines[1]["bytes"], 1000);
  EXPECT_EQ(lines[1]["stage"], "load");
  EXPECT_EQ(lines[2]["type"], "handoff");
  EXPECT_DOUBLE_EQ(lines[2]["gbps"].get<double>(), 2.0);
  EXPECT_EQ(lines[3]["type"], "step");
  EXPECT_EQ(lines[3]["samples_generated"], 4);
  EXPECT_DOUBLE_EQ(lines[3]["stage_seconds"]["rollout"].get<double>(), 1.0);
  EXPECT_EQ(lines[4]["type"], "eval");
  EXPECT_EQ(lines[4]["label"], "after");

  // Open truncates.
  ASSERT_TRUE(ledger_.Open(path).ok());
  EXPECT_TRUE(ReadJsonLines(path).empty());
}

TEST_F(LedgerTest, OpenFailureNamesThePath) {
  const absl::Status s = ledger_.Open("/nonexistent-dir/ledger.jsonl");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("/nonexistent-dir/ledger.jsonl"),
            std::string_view::npos);
}

TEST_F(LedgerTest, AFullDiskStopsTheFileAtTheLastWholeRecord) {
  const std::string path = TempPath("full_disk_ledger.jsonl");
  ASSERT_TRUE(ledger_.Open(path).ok());
  ledger_.RecordEval("before", EvalMetrics{8, 0.25, 0.1});
  ASSERT_TRUE(ledger_.status().ok());
  clock_.SetDiskBudget(20);  // less than one record
  ledger_.RecordEval("after", EvalMetrics{8, 0.5, 0.2});
  const absl::Status s = ledger_.status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find(path), std::string_view::npos) << s;
  EXPECT_NE(s.message().find("after 1 records"), std::string_view::npos) << s;
  // Space again: still nothing after the failure, and the file is whole.
  clock_.SetDiskBudget(env::testing::FakeEnv::kUnlimited);
  ledger_.RecordEval("later", EvalMetrics{8, 0.5, 0.2});
  const std::vector<json> records = ReadJsonLines(path);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0]["label"], "before");
  // The summary is written, and still reports the failure.
  EXPECT_EQ(ledger_.WriteSummary(TempPath("full_disk_summary.json")).code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(LedgerTest, SummaryHasTheRequiredKeys) {
  ledger_.RecordEval("before", EvalMetrics{8, 0.25, 0.1});
  for (int step = 0; step < 2; ++step) {
    ledger_.BeginStep(step);
    { auto s = ledger_.Begin(Stage::kRollout, "actor"); Tick(4); }
    { auto s = ledger_.Begin(Stage::kUpdate, "learner"); Tick(2); }
    StepCounts c;
    c.step = step;
    c.samples_generated = 10;
    c.samples_effective = 5;
    c.samples_zero_variance = 3;
    c.samples_truncated = 2;
    c.generated_tokens = 80;
    c.trained_tokens = 40;
    c.mean_reward = 0.1 * step;
    c.accuracy = 0.2 * step;
    c.sampling_rounds_extra = 1;
    c.prompts_extra = 3;
    c.sampling_seconds_extra = 0.25;
    c.samples_surplus = 4;
    c.samples_overlong = step;
    ledger_.EndStep(c);
  }
  ledger_.RecordObject("learner", Object::kParameters, 500, Stage::kLoad);
  ledger_.RecordObject("learner", Object::kGradients, 300, Stage::kUpdate);
  ledger_.RecordObject("learner", Object::kGradients, 0, Stage::kUpdate);
  ledger_.RecordEval("after", EvalMetrics{8, 0.75, 0.6});
  const std::string path = TempPath("summary.json");
  ASSERT_TRUE(ledger_.WriteSummary(path).ok());
  const json j = ReadJson(path);

  EXPECT_DOUBLE_EQ(j["eval"]["before"]["accuracy"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(j["eval"]["after"]["accuracy"].get<double>(), 0.75);
  EXPECT_EQ(j["eval"]["after"]["prompts"], 8);
  EXPECT_EQ(j["steps"], 2);
  for (const char* stage : {"load", "sft", "rollout", "verify", "reference",
                            "advantage", "update", "weight_sync", "eval",
                            "checkpoint"}) {
    EXPECT_TRUE(j["stage_seconds"].contains(stage)) << stage;
  }
  EXPECT_DOUBLE_EQ(j["stage_seconds"]["rollout"].get<double>(), 8.0);
  EXPECT_DOUBLE_EQ(j["rollout_update_ratio"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j["verifier_wait_seconds"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(j["effective_sample_rate"].get<double>(), 0.5);
  EXPECT_EQ(j["samples"]["generated"], 20);
  EXPECT_EQ(j["samples"]["effective"], 10);
  EXPECT_EQ(j["samples"]["zero_variance"], 6);
  EXPECT_EQ(j["samples"]["truncated"], 4);
  EXPECT_EQ(j["samples"]["unparseable"], 0);
  EXPECT_EQ(j["samples"]["error"], 0);
  EXPECT_EQ(j["samples"]["surplus"], 8);
  EXPECT_EQ(j["samples"]["overlong"], 1);
  EXPECT_EQ(j["dynamic_sampling"]["rounds_extra"], 2);
  EXPECT_EQ(j["dynamic_sampling"]["prompts_extra"], 6);
  EXPECT_DOUBLE_EQ(j["dynamic_sampling"]["seconds_extra"].get<double>(), 0.5);
  EXPECT_EQ(j["final_step"]["samples_overlong"], 1);
  EXPECT_EQ(j["final_step"]["prompts_extra"], 3);
  // Carried through a checkpoint's totals.
  Ledger resumed;
  ASSERT_TRUE(resumed.ImportState(ledger_.ExportState()).ok());
  const std::string again = TempPath("summary_again.json");
  ASSERT_TRUE(resumed.WriteSummary(again).ok());
  const json back = ReadJson(again);
  EXPECT_EQ(back["samples"]["surplus"], 8);
  EXPECT_EQ(back["dynamic_sampling"]["prompts_extra"], 6);
  EXPECT_DOUBLE_EQ(back["dynamic_sampling"]["seconds_extra"].get<double>(), 0.5);
  for (const char* k : {"count", "bytes", "seconds", "gbps"}) {
    EXPECT_TRUE(j["handoff"].contains(k)) << k;
  }
  EXPECT_DOUBLE_EQ(j["tokens_per_second"]["generated"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(j["tokens_per_second"]["trained"].get<double>(), 20.0);
  EXPECT_TRUE(j["memory"].contains("peak_bytes"));
  EXPECT_TRUE(j["memory"].contains("peak_stage"));
  EXPECT_TRUE(j["memory"]["live_at_peak"].is_array());
  EXPECT_EQ(j["memory"]["objects"]["parameters"], 500);
  EXPECT_EQ(j["memory"]["objects"]["gradients"], 300);
  for (const char* o : {"optimizer_state", "activations", "kv_cache",
                        "reference_model", "rollout_buffer", "communication"}) {
    EXPECT_EQ(j["memory"]["objects"][o], 0) << o;
  }
  EXPECT_DOUBLE_EQ(j["final_step"]["accuracy"].get<double>(), 0.2);
  EXPECT_DOUBLE_EQ(j["final_step"]["mean_reward"].get<double>(), 0.1);
  EXPECT_EQ(j["final_step"]["step"], 1);
  // Written atomically: no temporary is left behind.
  EXPECT_FALSE(std::ifstream(path + ".tmp").good());
}

TEST_F(LedgerTest, SummaryOfAnEmptyRunIsWellFormed) {
  const std::string path = TempPath("empty_summary.json");
  ASSERT_TRUE(ledger_.WriteSummary(path).ok());
  const json j = ReadJson(path);
  EXPECT_EQ(j["steps"], 0);
  EXPECT_TRUE(j["eval"].is_object());
  EXPECT_TRUE(j["final_step"].is_null());
  EXPECT_EQ(j["memory"]["peak_stage"], "none");
}

TEST_F(LedgerTest, ObjectPeakSumsRolesAndKeepsTheMaximum) {
  ledger_.RecordObject("actor", Object::kParameters, 100, Stage::kLoad);
  ledger_.RecordObject("learner", Object::kParameters, 100, Stage::kLoad);
  ledger_.RecordObject("actor", Object::kParameters, 0, Stage::kLoad);
  EXPECT_EQ(ledger_.object_peak_bytes(Object::kParameters), 200);
  EXPECT_EQ(ledger_.object_peak_bytes(Object::kKvCache), 0);
}

TEST_F(LedgerTest, PeakIsTrackedAcrossNestedSpansWithRealTensors) {
  MemoryTracker::Install();
  ASSERT_TRUE(MemoryTracker::installed());
  const int64_t base = MemoryTracker::Get().live_bytes();
  ledger_.RecordObject("learner", Object::kParameters, 8 * kMiB, Stage::kLoad);
  ledger_.BeginStep(0);
  {
    auto update = ledger_.Begin(Stage::kUpdate, "learner");
    at::Tensor params = at::zeros({2 * kMiB}, at::kByte);
    {
      auto rollout = ledger_.Begin(Stage::kRollout, "actor");
      ledger_.RecordObject("actor", Object::kKvCache, 4 * kMiB,
                           Stage::kRollout);
      at::Tensor kv = at::zeros({4 * kMiB}, at::kByte);
      ledger_.RecordObject("actor", Object::kKvCache, 0, Stage::kRollout);
    }
    at::Tensor grads = at::zeros({kMiB}, at::kByte);
  }
  const StepMetrics m = ledger_.EndStep(StepCounts{});
  // The peak was inside the inner rollout span: 2 MiB + 4 MiB live.
  EXPECT_GE(ledger_.peak_bytes() - base, 6 * kMiB);
  EXPECT_LT(ledger_.peak_bytes() - base, 7 * kMiB);
  EXPECT_GE(m.peak_bytes, ledger_.peak_bytes());

  const std::string path = TempPath("peak_summary.json");
  ASSERT_TRUE(ledger_.WriteSummary(path).ok());
  const json j = ReadJson(path);
  EXPECT_EQ(j["memory"]["peak_stage"], "rollout");
  EXPECT_EQ(j["memory"]["peak_bytes"], ledger_.peak_bytes());
  // The kv cache was released before the span ended but was live in it.
  EXPECT_EQ(j["memory"]["live_at_peak"], json({"parameters", "kv_cache"}));
  EXPECT_TRUE(j["memory"]["tracked"].get<bool>());
}

TEST_F(LedgerTest, ConcurrentSpansAndRecordsAreSafe) {
  Ledger ledger;  // Real clock.
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&ledger, i] {
      for (int k = 0; k < 200; ++k) {
        auto s = ledger.Begin(Stage::kRollout, "actor");
        ledger.RecordObject("actor" + std::to_string(i), Object::kKvCache, k,
                            Stage::kRollout);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GE(ledger.stage_seconds(Stage::kRollout), 0.0);
  EXPECT_GE(ledger.object_peak_bytes(Object::kKvCache), 199);
}

}  // namespace
}  // namespace trellis::ledger
