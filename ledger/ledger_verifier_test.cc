// The ledger's verifier records and totals, rollout evaluations that
// could not score every item, and multi-turn steps' environment records.

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "env/testing/fake_env.h"
#include "gtest/gtest.h"
#include "ledger/ledger.h"
#include "ledger/testing/jsonl.h"

namespace trellis::ledger {
namespace {

using nlohmann::json;
using testing_util::ReadJsonLines;

using testing_util::TempPath;

using testing_util::ReadJson;

class LedgerVerifierTest : public ::testing::Test {
 protected:
  env::testing::FakeEnv clock_;
  Ledger ledger_{&clock_};
};

TEST_F(LedgerVerifierTest, VerifierRecordsAndTheirTotalsPerVerifier) {
  const std::string path = TempPath("ledger_verifier.jsonl");
  ASSERT_TRUE(ledger_.Open(path).ok());
  ledger_.BeginStep(3);
  v1::VerifierStats a;
  a.set_verifier("subprocess@v1");
  a.set_items(16);
  a.set_cache_hits(4);
  a.set_timeouts(2);
  a.set_errors(1);
  a.set_retries(3);
  a.set_breaker_openings(1);
  a.set_breaker_rejected(5);
  a.set_dropped(2);
  a.set_calls(6);
  a.set_wait_seconds(1.5);
  a.set_latency_p50_seconds(0.1);
  a.set_latency_p99_seconds(0.3);
  (*a.mutable_errors_by_reason())["unavailable"] = 1;
  (*a.mutable_timeouts_by_reason())["deadline"] = 2;
  a.add_reported("plugin@3");
  ledger_.RecordVerifier(a);
  v1::VerifierStats b = a;
  b.set_latency_p99_seconds(0.2);
  b.clear_reported();
  b.add_reported("plugin@4");
  ledger_.RecordVerifier(b);
  v1::VerifierStats other;
  other.set_verifier("numeric");
  other.set_items(8);
  ledger_.RecordVerifier(other);

  const std::vector<json> lines = ReadJsonLines(path);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["type"], "verifier");
  EXPECT_EQ(lines[0]["step"], 3);
  EXPECT_EQ(lines[0]["verifier"], "subprocess@v1");
  for (const char* key : {"items", "cache_hits", "timeouts", "errors", "retries",
                          "breaker_openings", "breaker_rejected", "dropped", "calls"}) {
    EXPECT_EQ(lines[0][key].get<int64_t>(),
              a.GetReflection()->GetInt64(a, a.GetDescriptor()->FindFieldByName(key)))
        << key;
  }
  EXPECT_DOUBLE_EQ(lines[0]["wait_seconds"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(lines[0]["latency_p50_seconds"].get<double>(), 0.1);
  EXPECT_DOUBLE_EQ(lines[0]["latency_p99_seconds"].get<double>(), 0.3);
  EXPECT_EQ(lines[0]["errors_by_reason"], json({{"unavailable", 1}}));
  EXPECT_EQ(lines[0]["timeouts_by_reason"], json({{"deadline", 2}}));
  EXPECT_EQ(lines[0]["reported"], json({"plugin@3"}));

  const std::string summary_path = TempPath("ledger_verifier_summary.json");
  ASSERT_TRUE(ledger_.WriteSummary(summary_path).ok());
  const json summary = ReadJson(summary_path);
  const json& t = summary["verifiers"]["subprocess@v1"];
  EXPECT_EQ(t["items"], 32);
  EXPECT_EQ(t["timeouts"], 4);
  EXPECT_EQ(t["dropped"], 4);
  EXPECT_EQ(t["breaker_openings"], 2);
  EXPECT_DOUBLE_EQ(t["wait_seconds"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(t["latency_p99_seconds_max"].get<double>(), 0.3);
  EXPECT_EQ(summary["verifiers"]["numeric"]["items"], 8);
  EXPECT_EQ(t["errors_by_reason"], json({{"unavailable", 2}}));
  EXPECT_EQ(t["timeouts_by_reason"], json({{"deadline", 4}}));
  EXPECT_EQ(t["reported"], json({"plugin@3", "plugin@4"}));

  // The totals survive a checkpoint.
  Ledger resumed(&clock_);
  const absl::Status imported = resumed.ImportState(ledger_.ExportState());
  ASSERT_TRUE(imported.ok()) << imported;
  resumed.RecordVerifier(other);
  ASSERT_TRUE(resumed.WriteSummary(summary_path).ok());
  const json again = ReadJson(summary_path);
  EXPECT_EQ(again["verifiers"]["subprocess@v1"]["items"], 32);
  EXPECT_EQ(again["verifiers"]["subprocess@v1"]["errors_by_reason"], t["errors_by_reason"]);
  EXPECT_EQ(again["verifiers"]["subprocess@v1"]["reported"], t["reported"]);
  EXPECT_EQ(again["verifiers"]["numeric"]["items"], 16);
}

// A rollout evaluation that left items unscored says it is incomplete and
// has no accuracy, and the counts survive a checkpoint.
TEST_F(LedgerVerifierTest, IncompleteEvaluationIsMarkedWithItsCounts) {
  EvalMetrics e{8, 0.5, 0.2};
  e.unscored = 3;
  e.verify_retries = 6;
  ledger_.RecordEval("after", e);
  EvalMetrics full{8, 0.25, 0.1};
  full.unscored = 0;
  ledger_.RecordEval("before", full);
  const std::string summary_path = TempPath("ledger_incomplete_eval.json");
  ASSERT_TRUE(ledger_.WriteSummary(summary_path).ok());
  const json summary = ReadJson(summary_path);
  EXPECT_EQ(summary["eval"]["after"]["complete"], false);
  EXPECT_EQ(summary["eval"]["after"]["unscored"], 3);
  EXPECT_EQ(summary["eval"]["after"]["verify_retries"], 6);
  EXPECT_TRUE(summary["eval"]["after"]["accuracy"].is_null());
  EXPECT_TRUE(summary["eval"]["after"]["mean_reward"].is_null());
  EXPECT_EQ(summary["eval"]["before"]["complete"], true);
  EXPECT_EQ(summary["eval"]["before"]["accuracy"], 0.25);
  Ledger resumed(&clock_);
  ASSERT_TRUE(resumed.ImportState(ledger_.ExportState()).ok());
  ASSERT_TRUE(resumed.WriteSummary(summary_path).ok());
  EXPECT_EQ(ReadJson(summary_path)["eval"]["after"]["unscored"], 3);
}

TEST_F(LedgerVerifierTest, EnvironmentRecordsAndTheirStage) {
  const std::string path = TempPath("ledger_environment.jsonl");
  ASSERT_TRUE(ledger_.Open(path).ok());
  ledger_.BeginStep(2);
  v1::EnvironmentStats stats;
  stats.set_environment("guess@1");
  stats.set_episodes(4);
  stats.set_turns(10);
  stats.set_max_turns(4);
  stats.set_policy_tokens(40);
  stats.set_environment_tokens(12);
  stats.set_wait_seconds(1.5);
  stats.set_unoverlapped_wait_seconds(0.25);
  (*stats.mutable_ended_by())["done"] = 3;
  (*stats.mutable_ended_by())["environment_failed"] = 1;
  (*stats.mutable_errors_by_reason())["deadline"] = 1;
  stats.set_timeouts(1);
  ledger_.RecordEnvironment(stats, 3.0);
  const StepMetrics m = ledger_.EndStep({});
  EXPECT_DOUBLE_EQ(m.stage_seconds[static_cast<int>(Stage::kEnvironment)], 1.5);
  EXPECT_DOUBLE_EQ(ledger_.stage_seconds(Stage::kEnvironment), 1.5);
  json r;
  for (const json& record : ReadJsonLines(path)) {
    if (record["type"] == "environment") r = record;
  }
  ASSERT_FALSE(r.is_null());
  EXPECT_EQ(r["step"], 2);
  EXPECT_EQ(r["environment"], "guess@1");
  EXPECT_DOUBLE_EQ(r["turns_mean"].get<double>(), 2.5);
  EXPECT_EQ(r["turns_max"], 4);
  EXPECT_EQ(r["policy_tokens"], 40);
  EXPECT_EQ(r["environment_tokens"], 12);
  EXPECT_DOUBLE_EQ(r["wait_share"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(r["unoverlapped_wait_seconds"].get<double>(), 0.25);
  EXPECT_EQ(r["ended_by"], json({{"done", 3}, {"environment_failed", 1}}));
  EXPECT_EQ(r["errors_by_reason"], json({{"deadline", 1}}));
  EXPECT_EQ(r["timeouts"], 1);
  EXPECT_EQ(StageName(Stage::kEnvironment), "environment");
  EXPECT_EQ(StageFromName("environment"), Stage::kEnvironment);
}

}  // namespace
}  // namespace trellis::ledger
