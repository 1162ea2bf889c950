// The mixtures of experts of tests/fixtures/hf (qwen3_moe, mixtral) against
// transformers beyond the logits and greedy tokens of hf_model_test.cc: the
// auxiliary loss, the KV-cache decode's routing, the stacked layout
// transformers 5 holds, and the loader's errors.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/hf_config.h"
#include "model/hf_model.h"
#include "model/safetensors.h"
#include "model/testing/hf_fixtures.h"
#include "model/transformer.h"

namespace trellis::model {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::FixtureDir;
using testing::FixtureReference;

// A fresh directory holding fixture `name`'s config.json.
std::string ConfigOnlyCopy(const std::string& name, const std::string& tag) {
  const std::string dir =
      ::testing::TempDir() + "/hf_moe_" + tag + "_" + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy(FixtureDir(name) + "/config.json", dir + "/config.json");
  return dir;
}

class HfMoeTest : public ::testing::TestWithParam<const char*> {};

TEST_P(HfMoeTest, AuxLossMatchesTransformers) {
  Transformer model = testing::LoadHfTransformer(FixtureDir(GetParam()));
  ASSERT_TRUE(model);
  std::map<std::string, torch::Tensor> ref = FixtureReference(GetParam());
  torch::NoGradGuard no_grad;
  ExpertRouting routing;
  model->forward(ref["input_ids"], ref["position_ids"], ref["attention_mask"].to(torch::kBool),
                 nullptr, &routing);
  ASSERT_TRUE(routing.aux_loss.defined());
  EXPECT_NEAR(routing.aux_loss.item<float>(), ref["aux_loss"].item<float>(), 1e-5);
}

// Prefill then decode one token at a time: the logits and the router's
// choices of the full forward, each step's routing [B, 1, L, k].
TEST_P(HfMoeTest, KvCacheDecodeEqualsTheFullForward) {
  Transformer model = testing::LoadHfTransformer(FixtureDir(GetParam()));
  ASSERT_TRUE(model);
  std::map<std::string, torch::Tensor> ref = FixtureReference(GetParam());
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = torch::cat({ref["prompt_ids"], ref["generated_ids"]}, 1);
  const int64_t T = tokens.size(1), prefill = ref["prompt_ids"].size(1);
  ExpertRouting full;
  const torch::Tensor logits =
      model->forward(tokens, torch::arange(T).unsqueeze(0), {}, nullptr, &full);
  KVCache cache = model->NewCache(1, T);
  ExpertRouting step;
  model->forward(tokens.narrow(1, 0, prefill), torch::arange(prefill).unsqueeze(0), {}, &cache,
                 &step);
  EXPECT_TRUE(torch::equal(step.chosen, full.chosen.narrow(1, 0, prefill)));
  for (int64_t t = prefill; t < T; ++t) {
    const torch::Tensor out = model->forward(tokens.narrow(1, t, 1),
                                             torch::full({1, 1}, t, torch::kLong), {}, &cache,
                                             &step);
    ASSERT_EQ(step.chosen.sizes(), (std::vector<int64_t>{1, 1, 2, 2}));
    EXPECT_TRUE(torch::equal(step.chosen, full.chosen.narrow(1, t, 1))) << "position " << t;
    EXPECT_LT((out.select(1, 0) - logits.select(1, t)).abs().max().item<float>(), 1e-4f)
        << "position " << t;
  }
}

// A directory of stacked experts (the layout transformers 5 holds in
// memory and writes with save_original_format=False) loads as the same
// model.
TEST_P(HfMoeTest, StackedLayoutLoadsAsTheSameModel) {
  Transformer model = testing::LoadHfTransformer(FixtureDir(GetParam()));
  ASSERT_TRUE(model);
  const std::string dir = ConfigOnlyCopy(GetParam(), "stacked");
  ASSERT_TRUE(SaveSafetensors(dir + "/model.safetensors", model->NamedWeights()).ok());
  absl::StatusOr<Transformer> stacked = LoadHfTransformer(dir);
  ASSERT_TRUE(stacked.ok()) << stacked.status();
  const torch::Tensor tokens = FixtureReference(GetParam())["input_ids"];
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal((*stacked)->forward(tokens), model->forward(tokens)));
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfMoeTest, ::testing::Values("qwen3_moe", "mixtral"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

// model.safetensors of `tensors`, beside qwen3_moe's config.json: the
// status of the streaming load and of the eager one.
std::pair<absl::Status, absl::Status> LoadStatuses(const NamedTensors& tensors) {
  const std::string dir = ConfigOnlyCopy("qwen3_moe", "errors");
  EXPECT_TRUE(SaveSafetensors(dir + "/model.safetensors", tensors).ok());
  absl::Status streamed = LoadHfTransformer(dir).status();
  absl::StatusOr<HfModel> hf = LoadHfModel(dir);
  absl::Status eager = hf.ok() ? NewHfTransformer(*hf).status() : hf.status();
  fs::remove_all(dir);
  return {streamed, eager};
}

TEST(HfMoeErrors, AMissingOrDoubledExpertIsNamed) {
  absl::StatusOr<NamedTensors> weights =
      LoadSafetensors(FixtureDir("qwen3_moe") + "/model.safetensors");
  ASSERT_TRUE(weights.ok()) << weights.status();
  NamedTensors missing, doubled = *weights;
  for (const auto& [name, tensor] : *weights) {
    if (name != "model.layers.1.mlp.experts.5.up_proj.weight") missing.emplace_back(name, tensor);
  }
  doubled.emplace_back("model.layers.0.mlp.experts.down_proj", torch::zeros({8, 32, 24}));
  for (const absl::Status& s : {LoadStatuses(missing).first, LoadStatuses(missing).second}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(),
                HasSubstr("tensor 'model.layers.1.mlp.experts.gate_up_proj[5].up' (an expert's "
                          "matrix) is missing"))
        << s;
  }
  for (const absl::Status& s : {LoadStatuses(doubled).first, LoadStatuses(doubled).second}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("tensor 'model.layers.0.mlp.experts.down_proj' given "
                                       "twice (with 'model.layers.0.mlp.experts.0.down_proj"))
        << s;
  }
}

TEST(HfMoeErrors, AnExpertOfAnotherShapeOrIndexIsNamed) {
  NamedTensors bad = {{"model.layers.0.mlp.experts.2.gate_proj.weight", torch::zeros({25, 32})}};
  absl::Status s = LoadStatuses(bad).first;
  EXPECT_THAT(s.message(), HasSubstr("tensor 'model.layers.0.mlp.experts.2.gate_proj.weight' "
                                     "expected shape [24, 32], got [25, 32]"))
      << s;
  bad = {{"model.layers.0.mlp.experts.8.gate_proj.weight", torch::zeros({24, 32})}};
  s = LoadStatuses(bad).first;
  EXPECT_THAT(s.message(), HasSubstr("unknown tensor 'model.layers.0.mlp.experts.8.gate_proj"))
      << s;
}

}  // namespace
}  // namespace trellis::model
