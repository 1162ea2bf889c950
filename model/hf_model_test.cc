// Trellis against transformers on the fixtures of tests/fixtures/hf
// (scripts/make_hf_fixtures.sh): the same logits on a batch with a
// left-padded row, the same greedy tokens, and the loader's errors (the
// mixtures of experts' own checks: hf_moe_test.cc).
#include "model/hf_model.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/policy.h"
#include "model/safetensors.h"
#include "model/testing/hf_fixtures.h"

namespace trellis::model {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::FixtureReference;

const std::string kFixtures = TRELLIS_SOURCE_DIR "/tests/fixtures/hf";

Transformer Load(const std::string& dir) { return testing::LoadHfTransformer(dir); }

class HfFixtureTest : public ::testing::TestWithParam<const char*> {};

TEST_P(HfFixtureTest, LogitsMatchTransformers) {
  Transformer model = Load(kFixtures + "/" + GetParam());
  ASSERT_TRUE(model);
  std::map<std::string, torch::Tensor> ref = FixtureReference(GetParam());
  torch::NoGradGuard no_grad;
  const torch::Tensor valid = ref["attention_mask"].to(torch::kBool);
  const torch::Tensor logits = model->forward(ref["input_ids"], ref["position_ids"], valid);
  ASSERT_EQ(logits.sizes(), ref["logits"].sizes());
  // Padding positions are not compared (transformers' are arbitrary).
  const torch::Tensor error = (logits - ref["logits"]).abs().masked_fill(
      valid.logical_not().unsqueeze(-1), 0);
  EXPECT_LT(error.max().item<float>(), 1e-4f);
}

// transformers' greedy tokens, each the argmax here too, or within float
// noise of it: a near-tie may break the other way on another CPU, and the
// reference token is then fed on so that the rest stays comparable.
TEST_P(HfFixtureTest, GreedyGenerationMatchesGenerate) {
  Transformer model = Load(kFixtures + "/" + GetParam());
  ASSERT_TRUE(model);
  std::map<std::string, torch::Tensor> ref = FixtureReference(GetParam());
  torch::NoGradGuard no_grad;
  const torch::Tensor prompt = ref["prompt_ids"];
  const torch::Tensor want = ref["generated_ids"].flatten().contiguous();
  const int64_t new_tokens = want.numel();
  KVCache cache = model->NewCache(1, prompt.size(1) + new_tokens);
  torch::Tensor logits =
      model->forward(prompt, torch::arange(prompt.size(1)).unsqueeze(0), {}, &cache);
  int64_t exact = 0;
  for (int64_t i = 0; i < new_tokens; ++i) {
    const torch::Tensor last = logits.select(1, -1).flatten();
    const int64_t expected = want[i].item<int64_t>();
    const int64_t argmax = last.argmax().item<int64_t>();
    exact += argmax == expected;
    EXPECT_LT((last.max() - last[expected]).item<float>(), 1e-4f)
        << "token " << i << ": transformers chose " << expected << ", the argmax here is "
        << argmax;
    logits = model->forward(torch::full({1, 1}, expected, torch::kLong),
                            torch::full({1, 1}, cache.length, torch::kLong), {}, &cache);
  }
  EXPECT_GE(exact, new_tokens - 1) << "ties broke differently at more than one token";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfFixtureTest,
                         ::testing::Values("llama3_gqa", "llama_tied", "qwen2", "qwen3",
                                           "mistral", "qwen3_moe", "mixtral"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

// Each fixture turns on the feature it is there for.
TEST(HfFixtures, ConfigsHaveTheirFeatures) {
  auto config = [](const std::string& name) {
    absl::StatusOr<HfConfig> c = ReadHfConfig(kFixtures + "/" + name);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? c->model : trellis::v1::ModelConfig();
  };
  const trellis::v1::ModelConfig llama3 = config("llama3_gqa");
  EXPECT_EQ(llama3.rope_scaling().type(), trellis::v1::ModelConfig::RopeScaling::LLAMA3);
  EXPECT_EQ(llama3.rope_scaling().original_max_position_embeddings(), 64);
  EXPECT_EQ(llama3.n_kv_heads(), 2);
  EXPECT_FALSE(llama3.tie_embeddings());
  EXPECT_TRUE(config("llama_tied").tie_embeddings());
  EXPECT_TRUE(config("qwen2").attention_bias());
  EXPECT_TRUE(config("qwen2").tie_embeddings());
  EXPECT_TRUE(config("qwen3").qk_norm());
  EXPECT_EQ(config("qwen3").head_dim(), 16);
  EXPECT_EQ(config("mistral").max_position_embeddings(), 64);  // its sliding window
  const trellis::v1::ModelConfig qwen3_moe = config("qwen3_moe");
  EXPECT_EQ(qwen3_moe.num_experts(), 8);
  EXPECT_EQ(qwen3_moe.experts_per_token(), 2);
  EXPECT_EQ(qwen3_moe.expert_d_ff(), 24);
  EXPECT_FALSE(qwen3_moe.normalize_expert_weights());
  EXPECT_TRUE(qwen3_moe.qk_norm());
  EXPECT_FLOAT_EQ(qwen3_moe.router_aux_loss_coef(), 0.01f);
  const trellis::v1::ModelConfig mixtral = config("mixtral");
  EXPECT_EQ(mixtral.num_experts(), 4);
  EXPECT_EQ(mixtral.d_ff(), 48);  // the experts' width
  EXPECT_TRUE(mixtral.normalize_expert_weights());
  EXPECT_EQ(mixtral.n_kv_heads(), 1);
  EXPECT_EQ(mixtral.max_position_embeddings(), 256);  // no sliding window
}

// A copy of fixture `name` in a fresh directory, less the files `skip`.
std::string CopyFixture(const std::string& name, const std::string& skip = "") {
  const std::string dir =
      ::testing::TempDir() + "/hf_" + name + "_" + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& entry : fs::directory_iterator(kFixtures + "/" + name)) {
    const std::string file = entry.path().filename().string();
    if (file != skip) fs::copy(entry.path(), dir + "/" + file);
  }
  return dir;
}

TEST(HfModelErrors, MissingShardNamesIt) {
  const std::string dir = CopyFixture("llama3_gqa", "model-00002-of-00002.safetensors");
  absl::StatusOr<HfModel> model = LoadHfModel(dir);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(model.status().message(), HasSubstr("shard model-00002-of-00002.safetensors"));
  fs::remove_all(dir);
}

TEST(HfModelErrors, NoWeightsSaysWhatIsRead) {
  const std::string dir = CopyFixture("qwen3", "model.safetensors");
  absl::StatusOr<HfModel> model = LoadHfModel(dir);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(model.status().message(),
              HasSubstr("no model.safetensors or model.safetensors.index.json"));
  fs::remove_all(dir);
}

TEST(HfModelErrors, ShapeMismatchNamesTheTensor) {
  const std::string dir = CopyFixture("llama_tied");
  std::ifstream in(dir + "/config.json");
  std::string config((std::istreambuf_iterator<char>(in)), {});
  const std::string vocab = "\"vocab_size\": 128";
  ASSERT_NE(config.find(vocab), std::string::npos);
  config.replace(config.find(vocab), vocab.size(), "\"vocab_size\": 100");
  std::ofstream(dir + "/config.json", std::ios::trunc) << config;
  absl::StatusOr<HfModel> hf = LoadHfModel(dir);
  ASSERT_TRUE(hf.ok()) << hf.status();
  absl::StatusOr<Transformer> model = NewHfTransformer(*hf);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(model.status().message(),
              HasSubstr("tensor 'model.embed_tokens.weight' expected shape [100, 32], got "
                        "[128, 32]"));
  fs::remove_all(dir);
}

// A job's policy from model.path (NewPolicy): the directory's weights; a
// reward model (scalar head) keeps the trunk and draws its own head.
TEST(HfPolicy, NewPolicyStreamsTheDirectoryAndAScalarHeadKeepsItsOwn) {
  const std::string dir = kFixtures + "/llama3_gqa";
  absl::StatusOr<HfConfig> config = ReadHfConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  trellis::v1::ModelConfig m = config->model;
  m.set_path(dir);
  const Transformer want = Load(dir);
  for (Head head : {Head::kLanguageModel, Head::kScalar}) {
    absl::StatusOr<Transformer> policy = NewPolicy(m, trellis::v1::LoraConfig(), 0, 1, head);
    ASSERT_TRUE(policy.ok()) << policy.status();
    std::map<std::string, torch::Tensor> got;
    for (auto& [name, t] : (*policy)->NamedWeights()) got.emplace(name, t);
    for (auto& [name, t] : want->NamedWeights()) {
      if (name == "lm_head.weight" && head == Head::kScalar) continue;
      ASSERT_TRUE(got.count(name)) << name;
      EXPECT_TRUE(torch::equal(got[name], t)) << name;
    }
    if (head == Head::kScalar) {
      EXPECT_EQ(got.count("lm_head.weight"), 0u);
      EXPECT_GT(got.at("score.weight").abs().sum().item<double>(), 0.0);
    }
  }
}

}  // namespace
}  // namespace trellis::model
