#include "ledger/attribution.h"

#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "gtest/gtest.h"
#include "ledger/ledger.h"
#include "ledger/memory_tracker.h"

namespace trellis::ledger {
namespace {

class AttributionTest : public ::testing::Test {
 protected:
  void SetUp() override { MemoryTracker::Install(); }
};

const ObjectShare* Find(const PeakAttribution& p, const std::string& role,
                        const std::string& object) {
  for (const ObjectShare& o : p.objects) {
    if (o.role == role && o.object == object) return &o;
  }
  return nullptr;
}

TEST_F(AttributionTest, PeakIsObjectsLiveInTheSpanPlusTheRemainder) {
  Ledger ledger;
  const int64_t other = MemoryTracker::Get().live_bytes();  // not ours to explain
  torch::Tensor params = torch::zeros({1000});               // 4000 bytes
  ledger.RecordObject("learner", Object::kParameters, 4000, Stage::kLoad);
  {
    // A KV cache that lives and dies in an earlier span.
    auto rollout = ledger.Begin(Stage::kRollout, "actor");
    torch::Tensor kv = torch::zeros({500});
    ledger.RecordObject("actor", Object::kKvCache, 2000, Stage::kRollout);
    kv = torch::Tensor();
    ledger.RecordObject("actor", Object::kKvCache, 0, Stage::kRollout);
  }
  {
    auto update = ledger.Begin(Stage::kUpdate, "learner");
    torch::Tensor saved = torch::zeros({3000});  // 12000 bytes
    torch::Tensor scratch = torch::zeros({250});  // 1000 bytes, unreported
    ledger.RecordObject("learner", Object::kActivations, 12000, Stage::kUpdate);
    saved = torch::Tensor();
    scratch = torch::Tensor();
    ledger.RecordObject("learner", Object::kActivations, 0, Stage::kUpdate);
  }
  const std::vector<PeakAttribution> peaks = ledger.RolePeaks();
  ASSERT_EQ(peaks.size(), 2u);
  const PeakAttribution& learner = peaks[1];
  EXPECT_EQ(learner.role, "learner");
  EXPECT_EQ(learner.stage, "update");
  EXPECT_EQ(learner.measured_bytes, other + 4000 + 12000 + 1000);
  ASSERT_NE(Find(learner, "learner", "activations"), nullptr);
  EXPECT_EQ(Find(learner, "learner", "activations")->bytes, 12000);
  EXPECT_EQ(Find(learner, "actor", "kv_cache"), nullptr);  // freed before the span
  EXPECT_EQ(learner.objects[0].object, "activations");    // largest first
  EXPECT_EQ(learner.attributed_bytes, 16000);
  EXPECT_EQ(learner.unattributed_bytes, other + 1000);

  const PeakAttribution& actor = peaks[0];
  EXPECT_EQ(actor.role, "actor");
  EXPECT_EQ(actor.measured_bytes, other + 4000 + 2000);
  ASSERT_NE(Find(actor, "actor", "kv_cache"), nullptr);
  EXPECT_EQ(actor.unattributed_bytes, other);
}

// A span of two calls (a multi-turn rollout's turns), each reporting its
// KV cache and workspace at its own peak and freeing them before the next:
// the role counts at the call whose objects summed largest, not each
// object at its largest of any call (5000 + 4000 here, never held at once).
TEST_F(AttributionTest, ASpanOfCallsCountsTheLargestCallsObjectsTogether) {
  Ledger ledger;
  const int64_t other = MemoryTracker::Get().live_bytes();
  torch::Tensor params = torch::zeros({1000});  // 4000 bytes
  ledger.RecordObject("actor", Object::kParameters, 4000, Stage::kLoad);
  {
    auto rollout = ledger.Begin(Stage::kRollout, "actor");
    for (const auto& [cache, scratch] : {std::pair<int64_t, int64_t>{1000, 5000}, {4000, 1000}}) {
      torch::Tensor kv = torch::zeros({cache / 4});
      torch::Tensor work = torch::zeros({scratch / 4});
      work = torch::Tensor();
      kv = torch::Tensor();
      ledger.RecordObject("actor", Object::kKvCache, cache, Stage::kRollout);
      ledger.RecordObject("actor", Object::kWorkspace, scratch, Stage::kRollout);
      ledger.RecordObject("actor", Object::kWorkspace, 0, Stage::kRollout);
      ledger.RecordObject("actor", Object::kKvCache, 0, Stage::kRollout);
    }
  }
  const std::vector<PeakAttribution> peaks = ledger.RolePeaks();
  ASSERT_EQ(peaks.size(), 1u);
  const PeakAttribution& actor = peaks[0];
  EXPECT_EQ(actor.measured_bytes, other + 4000 + 1000 + 5000);
  ASSERT_NE(Find(actor, "actor", "kv_cache"), nullptr);
  EXPECT_EQ(Find(actor, "actor", "kv_cache")->bytes, 1000);
  ASSERT_NE(Find(actor, "actor", "workspace"), nullptr);
  EXPECT_EQ(Find(actor, "actor", "workspace")->bytes, 5000);
  EXPECT_EQ(actor.attributed_bytes, 4000 + 1000 + 5000);
  EXPECT_EQ(actor.unattributed_bytes, other);
}

TEST_F(AttributionTest, JsonRoundTripAndTable) {
  PeakAttribution p;
  p.role = "learner-0";
  p.stage = "update";
  p.step = 7;
  p.measured_bytes = 1000;
  p.objects = {{"learner-0", "parameters", 600}, {"actor-0", "kv_cache", 300}};
  p.attributed_bytes = 900;
  p.unattributed_bytes = 100;
  const nlohmann::json j = PeakAttributionJson(p);
  EXPECT_DOUBLE_EQ(j.at("unattributed_fraction").get<double>(), 0.1);
  const PeakAttribution back = PeakAttributionFromJson(j);
  EXPECT_EQ(back.role, p.role);
  EXPECT_EQ(back.step, 7);
  ASSERT_EQ(back.objects.size(), 2u);
  EXPECT_EQ(back.objects[1].object, "kv_cache");
  EXPECT_EQ(back.unattributed_bytes, 100);
  std::ostringstream table;
  PrintAttribution({p}, table);
  EXPECT_NE(table.str().find("unattributed"), std::string::npos) << table.str();
  EXPECT_NE(table.str().find("10.0%"), std::string::npos) << table.str();
}

}  // namespace
}  // namespace trellis::ledger
