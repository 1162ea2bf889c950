#include "model/shared_base.h"

#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/policy.h"
#include "model/testing/small_model.h"
#include "trellis/v1/job.pb.h"

namespace trellis::model {
namespace {

using trellis::model::testing::kVocab;

v1::LoraConfig Lora() {
  v1::LoraConfig lora;
  lora.set_rank(4);
  lora.set_alpha(8);
  lora.add_target_modules(v1::LoraConfig::Q_PROJ);
  lora.add_target_modules(v1::LoraConfig::DOWN_PROJ);
  return lora;
}

Transformer Policy(uint64_t seed, const v1::LoraConfig& lora = Lora()) {
  absl::StatusOr<Transformer> built = NewPolicy(testing::SmallConfig(), lora, kVocab, seed);
  EXPECT_TRUE(built.ok()) << built.status();
  return *std::move(built);
}

int64_t Bytes(const NamedTensors& tensors) {
  int64_t bytes = 0;
  for (const auto& [name, t] : tensors) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

// The embedded actor's model: after Attach its base is the learner's
// storage, its adapters its own, and it computes what it computed before.
TEST(SharedBaseTest, AnAttachedModelReadsTheHeldBaseAndComputesTheSame) {
  Transformer learner = Policy(3);
  SharedBase base;
  base.Hold(learner);
  Transformer actor = Policy(3);
  const torch::Tensor tokens = torch::randint(kVocab, {2, 6}, torch::kLong);
  torch::NoGradGuard no_grad;
  const torch::Tensor before = actor->forward(tokens);
  absl::StatusOr<int64_t> shared = base.Attach(actor);
  ASSERT_TRUE(shared.ok()) << shared.status();
  EXPECT_EQ(*shared, Bytes(learner->BaseWeights()));
  const NamedTensors own = actor->BaseWeights(), held = learner->BaseWeights();
  ASSERT_EQ(own.size(), held.size());
  for (size_t i = 0; i < own.size(); ++i) {
    EXPECT_EQ(own[i].second.data_ptr(), held[i].second.data_ptr()) << own[i].first;
  }
  for (const auto& [name, adapter] : actor->AdapterWeights()) {
    for (const auto& [learner_name, learner_adapter] : learner->AdapterWeights()) {
      EXPECT_NE(adapter.data_ptr(), learner_adapter.data_ptr()) << name;
    }
  }
  EXPECT_TRUE(torch::equal(actor->forward(tokens), before));
}

TEST(SharedBaseTest, AModelOfAnotherBaseIsRefusedAndKeepsItsWeights) {
  Transformer learner = Policy(3);
  SharedBase base;
  base.Hold(learner);
  Transformer other = Policy(4);
  const torch::Tensor first = other->BaseWeights().front().second;
  const void* own = first.data_ptr();
  absl::StatusOr<int64_t> shared = base.Attach(other);
  ASSERT_FALSE(shared.ok());
  EXPECT_THAT(std::string(shared.status().message()), ::testing::HasSubstr("differs"));
  EXPECT_EQ(other->BaseWeights().front().second.data_ptr(), own);
}

TEST(SharedBaseTest, NothingHeldSharesNothing) {
  SharedBase base;
  Transformer actor = Policy(3);
  absl::StatusOr<int64_t> shared = base.Attach(actor);
  ASSERT_TRUE(shared.ok()) << shared.status();
  EXPECT_EQ(*shared, 0);
  EXPECT_FALSE(base.IsBase(actor->MergedWeights()));
}

// The reference is taken from merged weights: the base itself while the
// adapters have not moved (B starts at zero), another model once they have.
TEST(SharedBaseTest, MergedWeightsAreTheBaseUntilAnAdapterTrains) {
  Transformer learner = Policy(3);
  SharedBase base;
  base.Hold(learner);
  EXPECT_TRUE(base.IsBase(learner->MergedWeights()));
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, adapter] : learner->AdapterWeights()) adapter.normal_(0.0, 0.3);
  }
  EXPECT_FALSE(base.IsBase(learner->MergedWeights()));
}

}  // namespace
}  // namespace trellis::model
