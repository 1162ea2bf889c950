// Device memory in the ledger (docs/gpu.md, "The ledger on CUDA"), driven by
// a fake device: the windows over one global peak, the span, step and
// summary records (allocated, reserved, peak, fragmentation), and the
// attribution of a role's device peak.

#include <torch/torch.h>

#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "env/testing/fake_env.h"
#include "gtest/gtest.h"
#include "ledger/internal/source_windows.h"
#include "ledger/ledger.h"
#include "ledger/memory_tracker.h"
#include "ledger/prometheus.h"
#include "ledger/run_view.h"
#include "ledger/testing/fake_memory_source.h"
#include "ledger/testing/jsonl.h"

namespace trellis::ledger {
namespace {

using internal::SourceWindows;
using nlohmann::json;
using testing_util::FakeDevice;

using testing_util::kMiB;

TEST(SourceWindowsTest, NestedWindowsEachKeepTheirOwnPeak) {
  auto device = std::make_shared<FakeDevice>();
  std::unique_ptr<MemorySource> source = device->Source();
  SourceWindows windows(source.get());
  device->Allocate(10);
  const int outer = windows.Open();
  device->Allocate(100);  // 110 in the outer window only.
  device->Free(100);
  const int inner = windows.Open();
  device->Allocate(50);  // 60.
  device->Free(50);
  const MemoryStats in = windows.Close(inner);
  EXPECT_EQ(in.peak_allocated_bytes, 60);
  EXPECT_EQ(in.allocated_bytes, 10);
  const MemoryStats out = windows.Close(outer);
  EXPECT_EQ(out.peak_allocated_bytes, 110);
  // The freed bytes stayed cached: reserved at its peak, 110.
  EXPECT_EQ(out.peak_reserved_bytes, 110);
  EXPECT_EQ(in.peak_reserved_bytes, 110);
  EXPECT_EQ(device->resets(), 4);  // One fold per Open and Close.
}

TEST(SourceWindowsTest, OverlappingWindowsSeeOnlyTheSpikesWhileTheyWereOpen) {
  auto device = std::make_shared<FakeDevice>();
  std::unique_ptr<MemorySource> source = device->Source();
  SourceWindows windows(source.get());
  const int a = windows.Open();
  device->Allocate(30);  // Only a.
  device->Free(30);
  const int b = windows.Open();
  device->Allocate(20);  // a and b.
  device->Free(20);
  const MemoryStats in_a = windows.Close(a);
  device->Allocate(70);  // Only b.
  device->Free(70);
  const MemoryStats in_b = windows.Close(b);
  EXPECT_EQ(in_a.peak_allocated_bytes, 30);
  EXPECT_EQ(in_b.peak_allocated_bytes, 70);
}

// The CPU tracker implements the same interface: windows over its global
// peak agree with its own PeakWindow.
TEST(SourceWindowsTest, OverTheCpuTrackerTheyAgreeWithItsPeakWindow) {
  MemoryTracker::Install();
  ASSERT_TRUE(MemoryTracker::installed());
  SourceWindows windows(&MemoryTracker::Get());
  PeakWindow reference;
  const int id = windows.Open();
  { at::Tensor t = at::empty({kMiB}, at::kFloat); }  // 4 MiB, freed.
  const MemoryStats cpu = windows.Close(id);
  EXPECT_EQ(cpu.peak_allocated_bytes, reference.peak_bytes());
  EXPECT_EQ(cpu.peak_reserved_bytes, cpu.peak_allocated_bytes);
  EXPECT_GE(cpu.peak_allocated_bytes - reference.start_live_bytes(), 4 * kMiB);
}

class DeviceLedgerTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) { return ::testing::TempDir() + "/" + name; }

  env::testing::FakeEnv clock_;
  Ledger ledger_{&clock_};
  // Segments of 64 bytes, as a caching allocator rounds its reservations.
  std::shared_ptr<FakeDevice> device_ = std::make_shared<FakeDevice>(64);
};

// The learner's update on the device: weights and gradients resident,
// activations and a workspace spike at its peak. The span record has the
// device's allocated, reserved and peak bytes and their difference; the
// role's device peak is its objects, with nothing unattributed.
TEST_F(DeviceLedgerTest, ASpanRecordsTheDevicePeakAndAttributesItToTheObjects) {
  ledger_.AddDeviceMemory(device_->Source(), {});
  ASSERT_TRUE(ledger_.Open(Path("device_span.jsonl")).ok());
  ledger_.BeginStep(0);
  device_->Allocate(1000);
  ledger_.RecordObject("learner-0", Object::kParameters, 1000, Stage::kLoad);
  {
    auto span = ledger_.Begin(Stage::kUpdate, "learner-0");
    device_->Allocate(1000);
    device_->Allocate(400);
    device_->Allocate(100);  // 2500 at the peak.
    ledger_.RecordObject("learner-0", Object::kGradients, 1000, Stage::kUpdate);
    ledger_.RecordObject("learner-0", Object::kActivations, 400, Stage::kUpdate);
    ledger_.RecordObject("learner-0", Object::kWorkspace, 100, Stage::kUpdate);
    device_->Free(500);
    ledger_.RecordObject("learner-0", Object::kActivations, 0, Stage::kUpdate);
    ledger_.RecordObject("learner-0", Object::kWorkspace, 0, Stage::kUpdate);
  }
  ledger_.EndStep({});

  const std::vector<PeakAttribution> peaks = ledger_.DeviceRolePeaks();
  ASSERT_EQ(peaks.size(), 1u);
  const PeakAttribution& p = peaks[0];
  EXPECT_EQ(p.device, "cuda:0");
  EXPECT_EQ(p.role, "learner-0");
  EXPECT_EQ(p.stage, "update");
  EXPECT_EQ(p.measured_bytes, 2500);
  EXPECT_EQ(p.attributed_bytes, 2500);
  EXPECT_EQ(p.unattributed_bytes, 0);
  // 2500 allocated in 64-byte segments: 40 segments, 2560 reserved.
  EXPECT_EQ(p.reserved_bytes, 2560);
  EXPECT_EQ(p.fragmentation_bytes(), 60);

  json span, step;
  for (const json& r : testing_util::ReadJsonLines(Path("device_span.jsonl"))) {
    if (r["type"] == "span") span = r;
    if (r["type"] == "step") step = r;
  }
  const json& d = span.at("device_memory").at("cuda:0");
  EXPECT_EQ(d["peak_allocated_bytes"], 2500);
  EXPECT_EQ(d["peak_reserved_bytes"], 2560);
  EXPECT_EQ(d["fragmentation_bytes"], 60);
  EXPECT_EQ(d["allocated_bytes"], 2000);  // At the span's end.
  EXPECT_EQ(d["reserved_bytes"], 2560);
  EXPECT_EQ(step.at("device_memory").at("cuda:0")["peak_allocated_bytes"], 2500);
}

// Fragmentation: the cache a freed block leaves is reserved but not
// allocated; a later, smaller peak shows it.
TEST_F(DeviceLedgerTest, FreedBlocksStayReservedAsFragmentation) {
  ledger_.AddDeviceMemory(device_->Source(), {});
  {
    auto rollout = ledger_.Begin(Stage::kRollout, "actor-0");
    device_->Allocate(6400);
    ledger_.RecordObject("actor-0", Object::kKvCache, 6400, Stage::kRollout);
    device_->Free(6400);
    ledger_.RecordObject("actor-0", Object::kKvCache, 0, Stage::kRollout);
  }
  {
    auto update = ledger_.Begin(Stage::kUpdate, "learner-0");
    device_->Allocate(1280);
    ledger_.RecordObject("learner-0", Object::kActivations, 1280, Stage::kUpdate);
  }
  std::map<std::string, PeakAttribution> by_role;
  for (const PeakAttribution& p : ledger_.DeviceRolePeaks()) by_role[p.role] = p;
  EXPECT_EQ(by_role["actor-0"].fragmentation_bytes(), 0);
  EXPECT_EQ(by_role["learner-0"].measured_bytes, 1280);
  EXPECT_EQ(by_role["learner-0"].reserved_bytes, 6400);
  EXPECT_EQ(by_role["learner-0"].fragmentation_bytes(), 5120);
  EXPECT_EQ(by_role["learner-0"].unattributed_bytes, 0);

  ASSERT_TRUE(ledger_.WriteSummary(Path("device_summary.json")).ok());
  std::ifstream in(Path("device_summary.json"));
  const json device = json::parse(in).at("memory").at("device").at("cuda:0");
  EXPECT_EQ(device["peak_allocated_bytes"], 6400);
  EXPECT_EQ(device["peak_reserved_bytes"], 6400);
  EXPECT_EQ(device["peak_stage"], "rollout");
  EXPECT_EQ(device["roles"], json::array());
  const json& learner = device.at("role_peaks").at("learner-0");
  EXPECT_EQ(learner["device"], "cuda:0");
  EXPECT_EQ(learner["fragmentation_bytes"], 5120);
  EXPECT_EQ(learner["unattributed_bytes"], 0);
}

// Disaggregated: each device's peaks count only the objects of the roles
// computing on it.
TEST_F(DeviceLedgerTest, EachDeviceCountsOnlyItsRolesObjects) {
  auto actor_device = std::make_shared<FakeDevice>();
  ledger_.AddDeviceMemory(device_->Source("cuda:0"), {"learner-0"});
  ledger_.AddDeviceMemory(actor_device->Source("cuda:1"), {"actor-0"});
  device_->Allocate(3200);
  ledger_.RecordObject("learner-0", Object::kParameters, 3200, Stage::kLoad);
  actor_device->Allocate(3000);
  ledger_.RecordObject("actor-0", Object::kParameters, 3000, Stage::kLoad);
  {
    auto update = ledger_.Begin(Stage::kUpdate, "learner-0");
    device_->Allocate(640);
    ledger_.RecordObject("learner-0", Object::kGradients, 640, Stage::kUpdate);
  }
  std::map<std::string, PeakAttribution> by_device;
  for (const PeakAttribution& p : ledger_.DeviceRolePeaks()) by_device[p.device] = p;
  ASSERT_EQ(by_device.size(), 2u);
  EXPECT_EQ(by_device["cuda:0"].measured_bytes, 3840);
  EXPECT_EQ(by_device["cuda:0"].unattributed_bytes, 0);
  // The learner's span on the actor's device: the actor's weights.
  EXPECT_EQ(by_device["cuda:1"].role, "learner-0");
  EXPECT_EQ(by_device["cuda:1"].measured_bytes, 3000);
  EXPECT_EQ(by_device["cuda:1"].attributed_bytes, 3000);
  ASSERT_EQ(by_device["cuda:1"].objects.size(), 1u);
  EXPECT_EQ(by_device["cuda:1"].objects[0].role, "actor-0");
}

// A resumed run's summary keeps the device peaks of the run before.
TEST_F(DeviceLedgerTest, DevicePeaksSurviveExportAndImport) {
  ledger_.AddDeviceMemory(device_->Source(), {});
  {
    auto update = ledger_.Begin(Stage::kUpdate, "learner-0");
    device_->Allocate(640);
    ledger_.RecordObject("learner-0", Object::kActivations, 640, Stage::kUpdate);
  }
  Ledger resumed(&clock_);
  ASSERT_TRUE(resumed.ImportState(ledger_.ExportState()).ok());
  const std::vector<PeakAttribution> peaks = resumed.DeviceRolePeaks();
  ASSERT_EQ(peaks.size(), 1u);
  EXPECT_EQ(peaks[0].device, "cuda:0");
  EXPECT_EQ(peaks[0].measured_bytes, 640);
  EXPECT_EQ(peaks[0].reserved_bytes, 640);
  ASSERT_TRUE(resumed.WriteSummary(Path("resumed_summary.json")).ok());
  std::ifstream in(Path("resumed_summary.json"));
  EXPECT_EQ(json::parse(in).at("memory").at("device").at("cuda:0")["peak_allocated_bytes"], 640);
}

// The dashboard's metrics: each device's last-step peaks.
TEST_F(DeviceLedgerTest, MetricsHaveTheLastStepsDevicePeaks) {
  RunView view;
  const Ledger::ObserverId id = ledger_.AddRecordObserver(
      [&view](std::string_view record) { ASSERT_TRUE(view.Add(record).ok()); });
  ledger_.AddDeviceMemory(device_->Source(), {});
  ledger_.BeginStep(0);
  device_->Allocate(100);  // 128 reserved.
  device_->Free(100);
  ledger_.EndStep({});
  PrometheusText out;
  view.WriteMetrics(out);
  EXPECT_NE(out.text().find(
                "trellis_device_memory_peak_bytes{device=\"cuda:0\",kind=\"allocated\"} 100\n"),
            std::string::npos)
      << out.text();
  EXPECT_NE(out.text().find(
                "trellis_device_memory_peak_bytes{device=\"cuda:0\",kind=\"fragmentation\"} 28\n"),
            std::string::npos)
      << out.text();
  ledger_.RemoveRecordObserver(id);
}

TEST_F(DeviceLedgerTest, WithoutADeviceRecordsHaveNoDeviceMemory) {
  ASSERT_TRUE(ledger_.Open(Path("no_device.jsonl")).ok());
  ledger_.BeginStep(0);
  { auto span = ledger_.Begin(Stage::kUpdate, "learner-0"); }
  ledger_.EndStep({});
  for (const json& r : testing_util::ReadJsonLines(Path("no_device.jsonl"))) {
    EXPECT_FALSE(r.contains("device_memory")) << r.dump();
  }
  EXPECT_TRUE(ledger_.DeviceRolePeaks().empty());
}

}  // namespace
}  // namespace trellis::ledger
