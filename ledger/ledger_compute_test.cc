// Each stage's arithmetic in the ledger: RecordFlops and RecordMachine, in
// the step records, summary.json and a resumed ledger's totals.
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "env/testing/fake_env.h"
#include "gtest/gtest.h"
#include "ledger/ledger.h"
#include "ledger/testing/jsonl.h"

namespace trellis::ledger {
namespace {

using nlohmann::json;
using testing_util::ReadJsonLines;

using testing_util::TempPath;

class LedgerComputeTest : public ::testing::Test {
 protected:
  void Tick(double seconds) { clock_.Advance(absl::Seconds(seconds)); }

  // One step: 4 s of update that did 8e9 FLOP, 2 s of reference that did
  // 1e9 (in two calls), 3 s of rollout with no arithmetic recorded.
  void RunStep(int64_t step) {
    ledger_.BeginStep(step);
    {
      auto span = ledger_.Begin(Stage::kRollout, "actor");
      Tick(3);
    }
    {
      auto span = ledger_.Begin(Stage::kReference, "reference");
      Tick(2);
      ledger_.RecordFlops(Stage::kReference, 0.25e9);
      ledger_.RecordFlops(Stage::kReference, 0.75e9);
    }
    {
      auto span = ledger_.Begin(Stage::kUpdate, "learner");
      Tick(4);
      ledger_.RecordFlops(Stage::kUpdate, 8e9);
    }
    StepCounts counts;
    counts.step = step;
    ledger_.EndStep(counts);
  }

  env::testing::FakeEnv clock_;
  Ledger ledger_{&clock_};
};

TEST_F(LedgerComputeTest, StepRecordGivesEachStageFlopRateAndShareOfPeak) {
  const std::string path = TempPath("compute_ledger.jsonl");
  ASSERT_TRUE(ledger_.Open(path).ok());
  MachineRecord machine;
  machine.matmul_peak_flops_per_second = 10e9;
  machine.intra_op_threads = 2;
  machine.inter_op_threads = 2;
  machine.blas_threads = 2;
  machine.threads_given = 4;
  machine.thread_probe_seconds = {{1, 0.5}, {2, 0.3}, {4, 0.31}};
  ledger_.RecordMachine(machine);
  RunStep(0);

  const std::vector<json> records = ReadJsonLines(path);
  const json* machine_record = nullptr;
  const json* step = nullptr;
  for (const json& r : records) {
    if (r["type"] == "machine") machine_record = &r;
    if (r["type"] == "step") step = &r;
  }
  ASSERT_NE(machine_record, nullptr);
  EXPECT_EQ((*machine_record)["step"], -1);
  EXPECT_DOUBLE_EQ((*machine_record)["matmul_peak_gflops_per_second"].get<double>(), 10);
  EXPECT_EQ((*machine_record)["intra_op_threads"], 2);
  EXPECT_EQ((*machine_record)["blas_threads"], 2);
  EXPECT_EQ((*machine_record)["threads_given"], 4);
  EXPECT_DOUBLE_EQ((*machine_record)["thread_probe_seconds"]["2"].get<double>(), 0.3);
  EXPECT_EQ((*machine_record)["thread_probe_seconds"].size(), 3u);
  ASSERT_NE(step, nullptr);
  const json& compute = (*step)["compute"];
  EXPECT_DOUBLE_EQ(compute["matmul_peak_gflops_per_second"].get<double>(), 10);
  // Only stages that recorded arithmetic.
  ASSERT_EQ(compute["stages"].size(), 2u) << compute.dump();
  const json& update = compute["stages"]["update"];
  EXPECT_DOUBLE_EQ(update["flops"].get<double>(), 8e9);
  EXPECT_DOUBLE_EQ(update["gflops_per_second"].get<double>(), 2);  // 8e9 / 4 s
  EXPECT_DOUBLE_EQ(update["peak_fraction"].get<double>(), 0.2);
  const json& reference = compute["stages"]["reference"];
  EXPECT_DOUBLE_EQ(reference["flops"].get<double>(), 1e9);
  EXPECT_DOUBLE_EQ(reference["gflops_per_second"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(reference["peak_fraction"].get<double>(), 0.05);
}

TEST_F(LedgerComputeTest, StepsCountTheirOwnFlopAndSummaryTheRunTotals) {
  ledger_.RecordMachine({4e9, 1, 1, 1});
  RunStep(0);
  RunStep(1);
  EXPECT_DOUBLE_EQ(ledger_.stage_flops(Stage::kUpdate), 16e9);
  EXPECT_DOUBLE_EQ(ledger_.stage_flops(Stage::kRollout), 0);
  EXPECT_DOUBLE_EQ(ledger_.matmul_peak_flops_per_second(), 4e9);
  const std::string path = TempPath("compute_summary.json");
  ASSERT_TRUE(ledger_.WriteSummary(path).ok());
  std::ifstream in(path);
  const json summary = json::parse(in);
  const json& update = summary["compute"]["stages"]["update"];
  EXPECT_DOUBLE_EQ(update["flops"].get<double>(), 16e9);
  EXPECT_DOUBLE_EQ(update["gflops_per_second"].get<double>(), 2);  // 16e9 / 8 s
  EXPECT_DOUBLE_EQ(update["peak_fraction"].get<double>(), 0.5);
  // The last step's record has that step's FLOP only.
  EXPECT_DOUBLE_EQ(summary["final_step"]["compute"]["stages"]["update"]["flops"].get<double>(),
                   8e9);
}

TEST_F(LedgerComputeTest, WithoutAPeakTheShareIsZero) {
  RunStep(0);
  const std::string path = TempPath("compute_nopeak.json");
  ASSERT_TRUE(ledger_.WriteSummary(path).ok());
  std::ifstream in(path);
  const json compute = json::parse(in)["compute"];
  EXPECT_DOUBLE_EQ(compute["matmul_peak_gflops_per_second"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(compute["stages"]["update"]["peak_fraction"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(compute["stages"]["update"]["gflops_per_second"].get<double>(), 2);
}

TEST_F(LedgerComputeTest, ResumedLedgerKeepsTheRunsFlopAndPeak) {
  ledger_.RecordMachine({4e9, 1, 1, 1});
  RunStep(0);
  env::testing::FakeEnv clock;
  Ledger resumed(&clock);
  ASSERT_TRUE(resumed.ImportState(ledger_.ExportState()).ok());
  EXPECT_DOUBLE_EQ(resumed.stage_flops(Stage::kUpdate), 8e9);
  EXPECT_DOUBLE_EQ(resumed.stage_flops(Stage::kReference), 1e9);
  EXPECT_DOUBLE_EQ(resumed.matmul_peak_flops_per_second(), 4e9);
}

TEST_F(LedgerComputeTest, StateFromBeforeFlopsImportsAsNone) {
  RunStep(0);
  json state = json::parse(ledger_.ExportState());
  state.erase("stage_flops");
  state.erase("matmul_peak");
  Ledger resumed(&clock_);
  ASSERT_TRUE(resumed.ImportState(state.dump()).ok());
  EXPECT_DOUBLE_EQ(resumed.stage_flops(Stage::kUpdate), 0);
  EXPECT_DOUBLE_EQ(resumed.matmul_peak_flops_per_second(), 0);
}

TEST_F(LedgerComputeTest, TooManyStageFlopsIsDataLossNamingTheField) {
  json state = json::parse(ledger_.ExportState());
  state["stage_flops"] = std::vector<double>(kNumStages + 1, 1.0);
  Ledger resumed(&clock_);
  const absl::Status s = resumed.ImportState(state.dump());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("stage_flops"), std::string::npos) << s;
}

}  // namespace
}  // namespace trellis::ledger
