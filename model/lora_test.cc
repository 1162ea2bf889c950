#include "model/lora.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "config/choice.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/testing/small_model.h"
#include "model/transformer.h"
#include "trellis/v1/job.pb.h"

namespace trellis::model {
namespace {

using ::testing::HasSubstr;

using trellis::model::testing::kVocab;
constexpr uint64_t kLoraSeed = 11;

using trellis::model::testing::SmallConfig;

v1::LoraConfig Lora(int rank, std::vector<std::string> targets = {}) {
  v1::LoraConfig lora;
  lora.set_rank(rank);
  lora.set_alpha(8);
  for (auto& t : targets) {
    lora.add_target_modules(*config::ParseChoice<v1::LoraConfig::Projection>(t));
  }
  return lora;
}

Transformer MakeModel(const v1::LoraConfig& lora) {
  torch::manual_seed(kLoraSeed);
  return Transformer(SmallConfig(), kVocab, Head::kLanguageModel, lora);
}

std::vector<std::string> Names(const std::vector<std::pair<std::string, torch::Tensor>>& named) {
  std::vector<std::string> out;
  for (const auto& [name, t] : named) out.push_back(name);
  return out;
}

// Gives every adapter's B random values, so that the adapters change the
// model's function.
void PerturbAdapters(Transformer& model) {
  torch::NoGradGuard no_grad;
  for (auto& [name, t] : model->AdapterWeights()) {
    if (name.find("lora_B") != std::string::npos) t.normal_(0.0, 0.3);
  }
}

TEST(LoraTest, TargetsNameTheAdaptedProjections) {
  Transformer model = MakeModel(Lora(4));
  std::vector<std::string> adapters = Names(model->AdapterWeights());
  EXPECT_EQ(adapters.size(), 2u * 2u * 2u);  // layers x {q, v} x {A, B}
  EXPECT_THAT(adapters, ::testing::Contains("model.layers.0.self_attn.q_proj.lora_A.weight"));
  EXPECT_THAT(adapters, ::testing::Contains("model.layers.1.self_attn.v_proj.lora_B.weight"));
  for (const auto& [name, t] : model->AdapterWeights()) {
    if (name == "model.layers.0.self_attn.q_proj.lora_A.weight") {
      EXPECT_EQ(t.sizes(), (std::vector<int64_t>{4, 32}));
    }
    if (name == "model.layers.1.self_attn.v_proj.lora_B.weight") {
      EXPECT_EQ(t.sizes(), (std::vector<int64_t>{16, 4}));  // n_kv_heads * head_dim
    }
  }

  Transformer mlp = MakeModel(Lora(2, {"down_proj", "o_proj"}));
  for (const std::string& name : Names(mlp->AdapterWeights())) {
    EXPECT_TRUE(name.find("down_proj") != std::string::npos ||
                name.find("o_proj") != std::string::npos)
        << name;
  }
  EXPECT_EQ(mlp->AdapterWeights().size(), 8u);
  EXPECT_FALSE(MakeModel(Lora(0))->has_adapters());
  EXPECT_TRUE(MakeModel(Lora(0))->AdapterWeights().empty());
}

// The base does not depend on the adapters: under the same seed a LoRA
// model's base weights are the plain model's, bit for bit, and with B = 0 it
// computes the same logits.
TEST(LoraTest, FreshAdaptersLeaveTheBaseModelUnchanged) {
  Transformer plain = MakeModel(Lora(0));
  Transformer lora = MakeModel(Lora(4, {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                        "up_proj", "down_proj"}));
  const auto base = lora->BaseWeights();
  const auto reference = plain->NamedWeights();
  ASSERT_EQ(Names(base), Names(reference));
  for (size_t i = 0; i < base.size(); ++i) {
    EXPECT_TRUE(torch::equal(base[i].second, reference[i].second)) << base[i].first;
  }
  for (const auto& [name, t] : lora->AdapterWeights()) {
    if (name.find("lora_B") != std::string::npos) {
      EXPECT_EQ(t.abs().max().item<float>(), 0.0f) << name;
    } else {
      EXPECT_GT(t.abs().max().item<float>(), 0.0f) << name;
      EXPECT_LE(t.abs().max().item<double>(), 1.0 / std::sqrt(t.size(1))) << name;
    }
  }
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = torch::randint(kVocab, {3, 9}, torch::kLong);
  EXPECT_TRUE(torch::equal(lora->forward(tokens), plain->forward(tokens)));
}

// With trained (non-zero) adapters, the LoRA model's logits equal a plain
// model's that holds the merged weights W + (alpha / rank) B A, to float32
// rounding (1e-5 on logits of magnitude ~1).
TEST(LoraTest, ForwardMatchesTheMergedPlainModel) {
  Transformer lora = MakeModel(Lora(4, {"q_proj", "v_proj", "up_proj", "down_proj"}));
  PerturbAdapters(lora);
  Transformer plain = MakeModel(Lora(0));
  const auto merged = lora->MergedWeights();
  EXPECT_EQ(Names(merged), Names(plain->NamedWeights()));
  ASSERT_TRUE(plain->LoadWeights(merged).ok());

  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = torch::randint(kVocab, {3, 9}, torch::kLong);
  const torch::Tensor a = lora->forward(tokens), b = plain->forward(tokens);
  EXPECT_LT((a - b).abs().max().item<double>(), 1e-5);
  // The adapters do change the function (this is not the base model).
  const torch::Tensor base = MakeModel(Lora(0))->forward(tokens);
  EXPECT_GT((a - base).abs().max().item<double>(), 1e-2);
}

TEST(LoraTest, OnlyAdaptersGetGradients) {
  Transformer model = MakeModel(Lora(4));
  for (const auto& [name, t] : model->BaseWeights()) EXPECT_FALSE(t.requires_grad()) << name;
  for (const auto& [name, t] : model->AdapterWeights()) EXPECT_TRUE(t.requires_grad()) << name;
  const torch::Tensor tokens = torch::randint(kVocab, {2, 7}, torch::kLong);
  model->forward(tokens).logsumexp(-1).sum().backward();
  for (const auto& [name, t] : model->BaseWeights()) EXPECT_FALSE(t.grad().defined()) << name;
  for (const auto& [name, t] : model->AdapterWeights()) {
    ASSERT_TRUE(t.grad().defined()) << name;
    // With B = 0 the gradient reaches B only; A's is exactly zero.
    const double g = t.grad().abs().max().item<double>();
    if (name.find("lora_B") != std::string::npos) {
      EXPECT_GT(g, 0.0) << name;
    } else {
      EXPECT_EQ(g, 0.0) << name;
    }
  }
  // A plain model trains everything.
  for (const auto& [name, t] : MakeModel(Lora(0))->NamedWeights()) {
    EXPECT_TRUE(t.requires_grad()) << name;
  }
}

TEST(LoraTest, LoadsBaseAdaptersAndFullWeightsByName) {
  Transformer source = MakeModel(Lora(4));
  PerturbAdapters(source);
  torch::manual_seed(kLoraSeed + 1);
  Transformer target(SmallConfig(), kVocab, Head::kLanguageModel, Lora(4));

  // Plain Llama weights are not a LoRA model's full set...
  absl::Status s = target->LoadWeights(MakeModel(Lora(0))->NamedWeights());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("lora_A.weight' is missing"));
  // ...but they are its base; the adapters stay as they were.
  const torch::Tensor adapter_before = target->AdapterWeights()[0].second.clone();
  ASSERT_TRUE(target->LoadBaseWeights(source->BaseWeights()).ok());
  EXPECT_TRUE(torch::equal(target->AdapterWeights()[0].second, adapter_before));
  EXPECT_EQ(target->LoadBaseWeights(source->NamedWeights()).code(),
            absl::StatusCode::kInvalidArgument);
  // The adapters alone, the base kept; not a set with the base in it.
  const torch::Tensor base_before = target->BaseWeights()[0].second.clone();
  ASSERT_TRUE(target->LoadAdapterWeights(source->AdapterWeights()).ok());
  EXPECT_TRUE(torch::equal(target->AdapterWeights()[0].second, source->AdapterWeights()[0].second));
  EXPECT_TRUE(torch::equal(target->BaseWeights()[0].second, base_before));
  EXPECT_EQ(target->LoadAdapterWeights(source->NamedWeights()).code(),
            absl::StatusCode::kInvalidArgument);

  ASSERT_TRUE(target->LoadWeights(source->NamedWeights()).ok());
  const auto got = target->NamedWeights(), want = source->NamedWeights();
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(torch::equal(got[i].second, want[i].second)) << got[i].first;
  }
}

}  // namespace
}  // namespace trellis::model
