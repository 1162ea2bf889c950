// The ledger on a CUDA device (docs/gpu.md, "The ledger on CUDA"): tensors
// of known sizes allocated inside spans, the caching allocator's allocated,
// reserved and peak bytes in the records, fragmentation from a cached
// block, and each role's device peak reconciled with its objects within 5%.
// Labelled gpu; skips where no CUDA device is visible.

#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "env/testing/fake_env.h"
#include "gtest/gtest.h"
#include "ledger/cuda_memory.h"
#include "ledger/ledger.h"
#include "ledger/testing/fake_memory_source.h"
#include "ledger/testing/jsonl.h"

namespace trellis::ledger {
namespace {

using nlohmann::json;

using testing_util::kMiB;

// A float32 tensor of `mib` MiB on the device, and its bytes.
at::Tensor DeviceTensor(int64_t mib) {
  return torch::empty({mib * kMiB / 4},
                      torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA, 0));
}
int64_t Bytes(const at::Tensor& t) { return t.numel() * t.element_size(); }

class CudaLedgerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) {
      GTEST_SKIP() << "no CUDA device visible: torch::cuda::is_available() is false";
    }
    absl::StatusOr<std::unique_ptr<MemorySource>> source = CudaMemory(0);
    ASSERT_TRUE(source.ok()) << source.status();
    // Start from an empty cache, so reserved bytes are this test's.
    c10::cuda::CUDACachingAllocator::emptyCache();
    ledger_.AddDeviceMemory(*std::move(source), {});
  }

  std::string Path(const std::string& name) { return ::testing::TempDir() + "/" + name; }

  env::testing::FakeEnv clock_;
  Ledger ledger_{&clock_};
};

// A learner's update: weights and gradients resident, activations and a
// workspace at the peak. Measured is the allocator's allocated bytes.
TEST_F(CudaLedgerTest, TheUpdatesPeakIsAllocatedAndReconcilesWithinFivePercent) {
  const int64_t before = CudaMemory(0).value()->Stats().allocated_bytes;
  ASSERT_TRUE(ledger_.Open(Path("cuda_ledger.jsonl")).ok());
  ledger_.BeginStep(0);
  at::Tensor weights = DeviceTensor(64);
  ledger_.RecordObject("learner-0", Object::kParameters, Bytes(weights), Stage::kLoad);
  at::Tensor gradients;  // Outlives the span.
  {
    auto span = ledger_.Begin(Stage::kUpdate, "learner-0");
    gradients = DeviceTensor(64);
    at::Tensor activations = DeviceTensor(32);
    ledger_.RecordObject("learner-0", Object::kGradients, Bytes(gradients), Stage::kUpdate);
    ledger_.RecordObject("learner-0", Object::kActivations, Bytes(activations), Stage::kUpdate);
    {
      at::Tensor workspace = DeviceTensor(16);
      ledger_.RecordObject("learner-0", Object::kWorkspace, Bytes(workspace), Stage::kUpdate);
    }
    ledger_.RecordObject("learner-0", Object::kWorkspace, 0, Stage::kUpdate);
    activations.reset();
    ledger_.RecordObject("learner-0", Object::kActivations, 0, Stage::kUpdate);
  }
  ledger_.EndStep({});

  const std::vector<PeakAttribution> peaks = ledger_.DeviceRolePeaks();
  ASSERT_EQ(peaks.size(), 1u);
  const PeakAttribution& p = peaks[0];
  std::ostringstream table;
  PrintAttribution(peaks, table);
  EXPECT_EQ(p.device, "cuda:0");
  EXPECT_EQ(p.measured_bytes, before + 176 * kMiB) << table.str();
  EXPECT_LE(std::abs(p.unattributed_fraction()), 0.05) << table.str();
  EXPECT_GE(p.reserved_bytes, p.measured_bytes) << table.str();
  EXPECT_EQ(p.fragmentation_bytes(), p.reserved_bytes - p.measured_bytes);

  json span;
  for (const json& r : testing_util::ReadJsonLines(Path("cuda_ledger.jsonl"))) {
    if (r["type"] == "span") span = r;
  }
  const json& d = span.at("device_memory").at("cuda:0");
  EXPECT_EQ(d["peak_allocated_bytes"], p.measured_bytes);
  EXPECT_EQ(d["peak_reserved_bytes"], p.reserved_bytes);
  // Gradients and weights are still allocated at the span's end; the
  // freed blocks stay reserved (cached).
  EXPECT_EQ(d["allocated_bytes"], before + 128 * kMiB);
  EXPECT_EQ(d["reserved_bytes"], p.reserved_bytes);
}

// A freed 256 MiB block stays in the allocator's cache: the next span's
// 64 MiB peak is served from it, reserved stays at 256 MiB or more, and
// the difference is fragmentation.
TEST_F(CudaLedgerTest, ACachedBlockIsReservedButNotAllocated) {
  {
    auto rollout = ledger_.Begin(Stage::kRollout, "actor-0");
    at::Tensor kv = DeviceTensor(256);
    ledger_.RecordObject("actor-0", Object::kKvCache, Bytes(kv), Stage::kRollout);
    kv.reset();
    ledger_.RecordObject("actor-0", Object::kKvCache, 0, Stage::kRollout);
  }
  at::Tensor activations;
  {
    auto update = ledger_.Begin(Stage::kUpdate, "learner-0");
    activations = DeviceTensor(64);
    ledger_.RecordObject("learner-0", Object::kActivations, Bytes(activations), Stage::kUpdate);
  }
  std::map<std::string, PeakAttribution> by_role;
  for (const PeakAttribution& p : ledger_.DeviceRolePeaks()) by_role[p.role] = p;
  const PeakAttribution& learner = by_role.at("learner-0");
  std::ostringstream table;
  PrintAttribution(ledger_.DeviceRolePeaks(), table);
  EXPECT_GE(learner.reserved_bytes, 256 * kMiB) << table.str();
  EXPECT_GE(learner.fragmentation_bytes(), 192 * kMiB) << table.str();
  EXPECT_LE(std::abs(learner.unattributed_fraction()), 0.05) << table.str();
  EXPECT_LE(std::abs(by_role.at("actor-0").unattributed_fraction()), 0.05) << table.str();
}

// Spans nest: the outer span's peak is the higher of its two inner spans',
// and each inner span sees only its own spike.
TEST_F(CudaLedgerTest, NestedSpansEachGetTheirOwnPeak) {
  ASSERT_TRUE(ledger_.Open(Path("cuda_nested.jsonl")).ok());
  const int64_t before = CudaMemory(0).value()->Stats().allocated_bytes;
  {
    auto outer = ledger_.Begin(Stage::kRollout, "scheduler");
    {
      auto a = ledger_.Begin(Stage::kVerify, "verifier-0");
      at::Tensor t = DeviceTensor(96);
    }
    {
      auto b = ledger_.Begin(Stage::kReference, "reference-0");
      at::Tensor t = DeviceTensor(32);
    }
  }
  std::map<std::string, int64_t> peak;
  for (const json& r : testing_util::ReadJsonLines(Path("cuda_nested.jsonl"))) {
    if (r["type"] != "span") continue;
    peak[r["stage"]] = r.at("device_memory").at("cuda:0")["peak_allocated_bytes"].get<int64_t>();
  }
  EXPECT_EQ(peak["verify"], before + 96 * kMiB);
  EXPECT_EQ(peak["reference"], before + 32 * kMiB);
  EXPECT_EQ(peak["rollout"], before + 96 * kMiB);
}

}  // namespace
}  // namespace trellis::ledger
