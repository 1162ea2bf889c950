// Ledger::RecordMove: the "move" records, the step's totals, summary.json's
// "moves" and their round trip through a checkpoint's ledger state.
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "env/testing/fake_env.h"
#include "gtest/gtest.h"
#include "ledger/ledger.h"
#include "ledger/testing/jsonl.h"

namespace trellis::ledger {
namespace {

using nlohmann::json;

using testing_util::ReadJson;

TEST(LedgerMovesTest, MovesAreRecordedWithHostBytesAndAddUpPerStepAndRun) {
  env::testing::FakeEnv env;
  Ledger ledger(&env);
  const std::string path = ::testing::TempDir() + "/moves_ledger.jsonl";
  ASSERT_TRUE(ledger.Open(path).ok());
  ledger.BeginStep(0);
  ledger.RecordMove("learner-0", Object::kOptimizerState, MoveDirection::kIn, 100, 0.5,
                    Stage::kUpdate);
  ledger.RecordMove("learner-0", Object::kOptimizerState, MoveDirection::kOut, 100, 0.25,
                    Stage::kUpdate);
  ledger.RecordMove("reference-0", Object::kReferenceModel, MoveDirection::kOut, 40, 0.125,
                    Stage::kReference);
  const StepMetrics step0 = ledger.EndStep(StepCounts{});
  EXPECT_EQ(step0.moves, 3);
  EXPECT_EQ(step0.move_bytes, 240);
  EXPECT_DOUBLE_EQ(step0.move_seconds, 0.875);
  ledger.BeginStep(1);
  ledger.RecordMove("reference-0", Object::kReferenceModel, MoveDirection::kIn, 40, 0.125,
                    Stage::kReference);
  const StepMetrics step1 = ledger.EndStep(StepCounts{});
  EXPECT_EQ(step1.move_bytes, 40);

  std::vector<json> moves;
  for (const json& r : testing_util::ReadJsonLines(path)) {
    if (r["type"] == "move") moves.push_back(r);
  }
  ASSERT_EQ(moves.size(), 4u);
  EXPECT_EQ(moves[0]["role"], "learner-0");
  EXPECT_EQ(moves[0]["object"], "optimizer_state");
  EXPECT_EQ(moves[0]["direction"], "in");
  EXPECT_EQ(moves[0]["stage"], "update");
  EXPECT_EQ(moves[0]["host_bytes"], 0);  // an "in" with nothing out held nothing
  EXPECT_EQ(moves[1]["host_bytes"], 100);
  EXPECT_EQ(moves[2]["host_bytes"], 40);
  EXPECT_EQ(moves[3]["host_bytes"], 0);
  EXPECT_DOUBLE_EQ(moves[1]["gbps"].get<double>(), 100 / 0.25 / 1e9);

  const std::string summary_path = ::testing::TempDir() + "/moves_summary.json";
  ASSERT_TRUE(ledger.WriteSummary(summary_path).ok());
  const json summary = ReadJson(summary_path)["moves"];
  EXPECT_EQ(summary["count"], 4);
  EXPECT_EQ(summary["bytes"], 280);
  EXPECT_DOUBLE_EQ(summary["seconds"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(summary["bytes_per_step"].get<double>(), 140);
  EXPECT_EQ(summary["host_peak_bytes"], 140);
  EXPECT_EQ(summary["objects"]["optimizer_state"]["bytes"], 200);
  EXPECT_EQ(summary["objects"]["reference_model"]["bytes"], 80);
  EXPECT_FALSE(summary["objects"].contains("parameters"));

  // A resumed run's summary keeps the moves before its checkpoint.
  Ledger resumed(&env);
  ASSERT_TRUE(resumed.ImportState(ledger.ExportState()).ok());
  ASSERT_TRUE(resumed.WriteSummary(summary_path).ok());
  EXPECT_EQ(ReadJson(summary_path)["moves"], summary);
}

TEST(LedgerMovesTest, StateWithoutMovesImportsAndUnknownObjectIsDataLoss) {
  env::testing::FakeEnv env;
  Ledger ledger(&env);
  json state = json::parse(ledger.ExportState());
  state.erase("moves");
  Ledger old(&env);
  EXPECT_TRUE(old.ImportState(state.dump()).ok());
  state["moves"] = json::parse(ledger.ExportState())["moves"];
  state["moves"]["objects"]["no_such_object"] = {{"bytes", 1}, {"seconds", 0.0}};
  const absl::Status s = old.ImportState(state.dump());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("no_such_object"), std::string::npos) << s;
}

// A worker's ledger hands each object and move record, in order, to its
// forwarding hook (launch/worker.cc sends them to the scheduler's ledger);
// after detaching, nothing.
TEST(LedgerMovesTest, ObjectsAndMovesAreForwardedInOrder) {
  env::testing::FakeEnv env;
  Ledger ledger(&env);
  std::vector<std::pair<std::string, ForwardedRecord>> forwarded;
  ledger.ForwardRecords([&forwarded](std::string_view role, const ForwardedRecord& record) {
    forwarded.emplace_back(std::string(role), record);
  });
  ledger.RecordObject("reference-0", Object::kReferenceModel, 40, Stage::kLoad);
  ledger.RecordMove("reference-0", Object::kReferenceModel, MoveDirection::kOut, 40, 0.5,
                    Stage::kLoad);
  ledger.ForwardRecords(nullptr);
  ledger.RecordMove("reference-0", Object::kReferenceModel, MoveDirection::kIn, 40, 0.5,
                    Stage::kReference);

  ASSERT_EQ(forwarded.size(), 2u);
  EXPECT_EQ(forwarded[0].first, "reference-0");
  const auto* object = std::get_if<ForwardedObject>(&forwarded[0].second);
  ASSERT_NE(object, nullptr);
  EXPECT_EQ(object->object, Object::kReferenceModel);
  EXPECT_EQ(object->bytes, 40);
  EXPECT_EQ(object->stage, Stage::kLoad);
  const auto* move = std::get_if<ForwardedMove>(&forwarded[1].second);
  ASSERT_NE(move, nullptr);
  EXPECT_EQ(move->object, Object::kReferenceModel);
  EXPECT_EQ(move->direction, MoveDirection::kOut);
  EXPECT_EQ(move->bytes, 40);
  EXPECT_DOUBLE_EQ(move->seconds, 0.5);
  EXPECT_EQ(move->stage, Stage::kLoad);
}

TEST(LedgerMovesTest, DirectionNamesRoundTrip) {
  for (MoveDirection d : {MoveDirection::kOut, MoveDirection::kIn}) {
    EXPECT_EQ(MoveDirectionFromName(MoveDirectionName(d)), d);
  }
  EXPECT_EQ(MoveDirectionFromName("sideways"), std::nullopt);
}

}  // namespace
}  // namespace trellis::ledger
