// SchedulerService.ReportLedger on its own (no server, no job): a worker's
// forwarded move records are replayed into the scheduler's ledger with the
// worker's id as their role, and a report with a record the ledger cannot
// take is refused whole, naming the field, before anything is recorded.

#include "scheduler/scheduler_service.h"

#include <grpcpp/grpcpp.h>

#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ledger/ledger.h"

namespace trellis::scheduler {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

v1::MoveRecord Move(const std::string& direction, int64_t bytes) {
  v1::MoveRecord m;
  m.set_object("optimizer_state");
  m.set_direction(direction);
  m.set_bytes(bytes);
  m.set_seconds(0.25);
  m.set_stage("update");
  return m;
}

class ReportLedgerTest : public ::testing::Test {
 protected:
  ReportLedgerTest() {
    ledger_.AddRecordObserver(
        [this](std::string_view line) { records_.push_back(json::parse(line)); });
    service_.AttachLedger(&ledger_);
  }
  ~ReportLedgerTest() override { service_.AttachLedger(nullptr); }

  grpc::Status Report(const v1::LedgerReport& report) {
    v1::Empty empty;
    return service_.ReportLedger(nullptr, &report, &empty);
  }

  std::vector<json> records_;
  ledger::Ledger ledger_;
  SchedulerService service_{absl::Seconds(1)};
};

TEST_F(ReportLedgerTest, ReplaysMovesWithTheWorkerAsRole) {
  ledger_.BeginStep(0);
  v1::LedgerReport report;
  report.set_worker_id("learner-0");
  *report.add_records()->mutable_move() = Move("out", 1000);
  *report.add_records()->mutable_move() = Move("in", 1000);
  v1::ObjectRecord* o = report.add_records()->mutable_object();
  o->set_object("optimizer_state");
  o->set_bytes(1000);
  o->set_stage("update");
  const grpc::Status s = Report(report);
  ASSERT_TRUE(s.ok()) << s.error_message();

  ASSERT_EQ(records_.size(), 3u);
  EXPECT_EQ(records_[0]["type"], "move");
  EXPECT_EQ(records_[0]["role"], "learner-0");
  EXPECT_EQ(records_[0]["object"], "optimizer_state");
  EXPECT_EQ(records_[0]["direction"], "out");
  EXPECT_EQ(records_[0]["bytes"], 1000);
  EXPECT_EQ(records_[0]["seconds"], 0.25);
  EXPECT_EQ(records_[0]["stage"], "update");
  EXPECT_EQ(records_[0]["host_bytes"], 1000);
  EXPECT_EQ(records_[1]["direction"], "in");
  EXPECT_EQ(records_[1]["host_bytes"], 0);
  EXPECT_EQ(records_[2]["type"], "object");

  const ledger::StepMetrics step = ledger_.EndStep(ledger::StepCounts());
  EXPECT_EQ(step.moves, 2);
  EXPECT_EQ(step.move_bytes, 2000);
  EXPECT_DOUBLE_EQ(step.move_seconds, 0.5);
}

TEST_F(ReportLedgerTest, RefusesABadMoveWholeNamingTheField) {
  struct Case {
    v1::MoveRecord move;
    std::string error;
  };
  std::vector<Case> cases;
  cases.push_back({Move("sideways", 1), "records[1].move.direction: unknown direction 'sideways'"});
  cases.push_back({Move("out", -1), "records[1].move.bytes: must be in [0, 2^48"});
  cases.push_back({Move("out", int64_t{1} << 49), "records[1].move.bytes: must be in [0, 2^48"});
  v1::MoveRecord unknown_object = Move("out", 1);
  unknown_object.set_object("unicorns");
  cases.push_back({unknown_object, "records[1].move.object: unknown object 'unicorns'"});
  v1::MoveRecord unknown_stage = Move("out", 1);
  unknown_stage.set_stage("nap");
  cases.push_back({unknown_stage, "records[1].move.stage: unknown stage 'nap'"});
  v1::MoveRecord nan_seconds = Move("out", 1);
  nan_seconds.set_seconds(std::numeric_limits<double>::quiet_NaN());
  cases.push_back({nan_seconds, "records[1].move.seconds: must be finite and >= 0"});
  v1::MoveRecord negative_seconds = Move("out", 1);
  negative_seconds.set_seconds(-2);
  cases.push_back({negative_seconds, "records[1].move.seconds: must be finite and >= 0"});

  for (const Case& c : cases) {
    v1::LedgerReport report;
    report.set_worker_id("reference-0");
    *report.add_records()->mutable_move() = Move("out", 5);
    *report.add_records()->mutable_move() = c.move;
    const grpc::Status s = Report(report);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.error;
    EXPECT_THAT(s.error_message(), HasSubstr("ledger report of reference-0: " + c.error));
  }
  v1::LedgerReport empty;
  empty.set_worker_id("reference-0");
  empty.add_records();
  const grpc::Status s = Report(empty);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("records[0]: empty"));
  // All or none: not even the good first record of each report.
  EXPECT_TRUE(records_.empty());
}

// An object record claiming a negative size or more than 2^48 bytes (256
// TiB) is refused naming the worker and the field, and nothing is written.
TEST_F(ReportLedgerTest, RefusesAnObjectOfAbsurdSizeNamingWorkerAndField) {
  for (int64_t bytes :
       {int64_t{-1000000000000}, int64_t{1000000000000000}, (int64_t{1} << 48) + 1}) {
    v1::LedgerReport report;
    report.set_worker_id("actor-3");
    v1::ObjectRecord* o = report.add_records()->mutable_object();
    o->set_object("parameters");
    o->set_bytes(bytes);
    o->set_stage("load");
    const grpc::Status s = Report(report);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bytes;
    EXPECT_THAT(
        s.error_message(),
        HasSubstr("ledger report of actor-3: records[0].object.bytes: must be in [0, 2^48"));
    EXPECT_THAT(s.error_message(), HasSubstr(absl::StrCat("found ", bytes)));
  }
  EXPECT_TRUE(records_.empty());
}

// A report's process memory with a bad figure is refused whole, naming the
// worker and the field; nothing of it is recorded.
TEST_F(ReportLedgerTest, RefusesABadProcessMemoryNamingWorkerAndField) {
  v1::LedgerReport report;
  report.set_worker_id("learner-0");
  v1::ObjectRecord* o = report.add_records()->mutable_object();
  o->set_object("parameters");
  o->set_bytes(100);
  o->set_stage("load");
  report.mutable_process()->set_peak_resident_bytes(1 << 20);
  report.mutable_process()->mutable_at_peak()->set_resident_bytes(-1);
  const grpc::Status s = Report(report);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              HasSubstr("ledger report of learner-0: process.at_peak.resident_bytes: must be in"));
  EXPECT_TRUE(records_.empty());
}

}  // namespace
}  // namespace trellis::scheduler
