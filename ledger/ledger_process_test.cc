// The ledger's look at its process (ledger/process_memory.h) with a fake
// sampler: span records' resident bytes, the step record's resident peak,
// and summary.json memory.process, every part non-negative.
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "env/testing/fake_env.h"
#include "gtest/gtest.h"
#include "ledger/ledger.h"
#include "ledger/process_memory.h"
#include "ledger/process_memory_proto.h"
#include "gmock/gmock.h"
#include "ledger/testing/fake_memory_source.h"
#include "ledger/testing/jsonl.h"

namespace trellis::ledger {
namespace {

using nlohmann::json;
using testing_util::FakeDevice;

class LedgerProcessTest : public ::testing::Test {
 protected:
  LedgerProcessTest() {
    SetProcessSamplerForTesting([this] { return next_; });
  }
  ~LedgerProcessTest() override { SetProcessSamplerForTesting(nullptr); }

  void Set(int64_t resident, int64_t peak, int64_t in_use, int64_t held) {
    next_.resident_bytes = resident;
    next_.peak_resident_bytes = peak;
    next_.heap_in_use_bytes = in_use;
    next_.heap_held_bytes = held;
  }

  ProcessSample next_;
};

TEST_F(LedgerProcessTest, RecordsResidentMemoryPerSpanStepAndStage) {
  env::testing::FakeEnv env;
  const std::string path = ::testing::TempDir() + "/process_ledger.jsonl";
  const std::string summary_path = ::testing::TempDir() + "/process_summary.json";
  {
    Ledger ledger(&env);
    ASSERT_TRUE(ledger.Open(path).ok());
    ledger.BeginStep(0);
    Set(4000, 4000, 1000, 1200);
    ledger.RecordObject("learner-0", Object::kParameters, 300, Stage::kLoad);
    {
      Ledger::Span span = ledger.Begin(Stage::kUpdate, "learner-0");
      // The high-water mark rose to 9000 inside the update.
      Set(5000, 9000, 2000, 2500);
    }
    Set(4500, 9000, 1800, 2500);
    ledger.EndStep(StepCounts{});
    ASSERT_TRUE(ledger.WriteSummary(summary_path).ok());
  }
  const std::vector<json> records = testing_util::ReadJsonLines(path);
  int spans = 0;
  int steps = 0;
  for (const json& r : records) {
    if (r["type"] == "span") {
      ++spans;
      EXPECT_EQ(r["resident_bytes"], 5000);
    }
    if (r["type"] == "step") {
      ++steps;
      EXPECT_EQ(r["resident_peak_bytes"], 9000);
    }
  }
  EXPECT_EQ(spans, 1);
  EXPECT_EQ(steps, 1);

  std::ifstream in(summary_path);
  const json process = json::parse(in)["memory"]["process"];
  EXPECT_EQ(process["peak_resident_bytes"], 9000);
  // The update's sample stands for the mark that rose inside it.
  EXPECT_EQ(process["resident_at_sample_bytes"], 9000);
  EXPECT_EQ(process["objects_bytes"], 300);
  EXPECT_EQ(process["stage_peak_resident_bytes"]["update"], 9000);
  EXPECT_EQ(process["stage_peak_resident_bytes"]["load"], 4000);
  EXPECT_EQ(process["stage_peak_resident_bytes"]["none"], 4500);
  int64_t parts = 0;
  for (const auto& [name, bytes] : process["parts"].items()) {
    EXPECT_GE(bytes.get<int64_t>(), 0) << name;
    parts += bytes.get<int64_t>();
  }
  EXPECT_EQ(parts, process["named_bytes"].get<int64_t>());
  EXPECT_EQ(process["named_bytes"].get<int64_t>() + process["remainder_bytes"].get<int64_t>() -
                process["named_beyond_resident_bytes"].get<int64_t>(),
            9000);
  EXPECT_GE(process["named_fraction"].get<double>(), 0);
  EXPECT_LE(process["named_fraction"].get<double>(), 1);
}

// A launched run's scheduler: the workers' objects reach its ledger as
// another process's (RecordRemoteObject). A peak the scheduler measures is
// never attributed to them (it was: learner-0's peak listed the actors'
// parameters and the unattributed line went negative), nor are they in
// its process memory; they still count in the run's object peaks.
TEST_F(LedgerProcessTest, AnotherProcesssObjectsAreNeverAttributedToThisOnesPeaks) {
  env::testing::FakeEnv env;
  Ledger ledger(&env);
  auto device = std::make_shared<FakeDevice>();
  ledger.AddDeviceMemory(device->Source("cuda:0"), {});
  Set(4000, 4000, 1000, 1200);
  ledger.RecordRemoteObject("actor-0", Object::kParameters, 5000, Stage::kLoad);
  ledger.RecordRemoteObject("learner-0", Object::kParameters, 5000, Stage::kLoad);
  {
    auto span = ledger.Begin(Stage::kUpdate, "learner-0");
    device->Allocate(640);
    Set(5000, 5000, 1500, 1700);
    ledger.RecordObject("scheduler", Object::kWorkspace, 640, Stage::kUpdate);
    ledger.RecordRemoteObject("learner-0", Object::kGradients, 5000, Stage::kUpdate);
  }
  const std::vector<PeakAttribution> peaks = ledger.DeviceRolePeaks();
  ASSERT_EQ(peaks.size(), 1u);
  EXPECT_EQ(peaks[0].measured_bytes, 640);
  EXPECT_EQ(peaks[0].attributed_bytes, 640);
  EXPECT_EQ(peaks[0].unattributed_bytes, 0);
  ASSERT_EQ(peaks[0].objects.size(), 1u);
  EXPECT_EQ(peaks[0].objects[0].role, "scheduler");
  EXPECT_EQ(ledger.object_peak_bytes(Object::kParameters), 10000);

  const std::string summary_path = ::testing::TempDir() + "/remote_summary.json";
  ASSERT_TRUE(ledger.WriteSummary(summary_path).ok());
  std::ifstream in(summary_path);
  EXPECT_EQ(json::parse(in)["memory"]["process"]["objects_bytes"], 640);
}

// A launched worker's process memory reaches the scheduler's ledger as its
// report carries it (v1::ProcessMemory): summary.json names the worker's
// peak part by part as the worker's own ledger did, beside the
// scheduler's own process.
TEST_F(LedgerProcessTest, AWorkersProcessIsSummarizedAsItsOwnLedgerNamedIt) {
  env::testing::FakeEnv env;
  Ledger worker(&env);
  Set(4000, 4000, 1000, 1200);  // The worker's first look: its baseline.
  worker.RecordObject("actor-0", Object::kParameters, 2000, Stage::kLoad);
  Set(7000, 7500, 3500, 4000);
  const ProcessMemoryAccount sent = worker.ProcessAccount();
  EXPECT_EQ(sent.peak_resident_bytes, 7500);
  EXPECT_EQ(sent.objects_bytes, 2000);

  absl::StatusOr<ProcessMemoryAccount> received =
      ProcessMemoryFromProto(ProcessMemoryToProto(sent), "process.");
  ASSERT_TRUE(received.ok()) << received.status();
  Ledger scheduler(&env);
  scheduler.RecordRemoteProcess("actor-0", *received);
  const std::string summary_path = ::testing::TempDir() + "/worker_process_summary.json";
  ASSERT_TRUE(scheduler.WriteSummary(summary_path).ok());
  std::ifstream in(summary_path);
  const json memory = json::parse(in)["memory"];
  const json& actor = memory["worker_processes"]["actor-0"];
  EXPECT_EQ(actor, ProcessMemoryAccountJson(sent)) << actor.dump(2);
  EXPECT_EQ(actor["peak_resident_bytes"], 7500);
  EXPECT_TRUE(memory.contains("process"));
}

// A figure out of [0, 2^48] is refused naming its field.
TEST(ProcessMemoryProtoTest, RefusesAFigureOutOfRangeNamingItsField) {
  v1::ProcessMemory p;
  p.set_peak_resident_bytes(1000);
  p.mutable_baseline()->set_heap_held_bytes(-5);
  absl::StatusOr<ProcessMemoryAccount> a = ProcessMemoryFromProto(p, "process.");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(a.status().message(),
              ::testing::HasSubstr("process.baseline.heap_held_bytes: must be in [0, 2^48"));
  p.mutable_baseline()->set_heap_held_bytes(0);
  p.set_tracked_bytes((int64_t{1} << 48) + 1);
  EXPECT_THAT(ProcessMemoryFromProto(p, "process.").status().message(),
              ::testing::HasSubstr("process.tracked_bytes"));
}

}  // namespace
}  // namespace trellis::ledger
