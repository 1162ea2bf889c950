// Exports of the Hugging Face fixtures (tests/fixtures/hf) and of the
// built-in model, read back by Trellis: the same config, the same logits,
// the stored dtype, the tokenizer files, and the errors.
#include "model/hf_export.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "model/hf_config.h"
#include "model/hf_model.h"
#include "model/policy.h"
#include "model/safetensors.h"
#include "model/testing/hf_fixtures.h"
#include "model/testing/small_model.h"

namespace trellis::model {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::LoadHfTransformer;

const std::string kFixtures = TRELLIS_SOURCE_DIR "/tests/fixtures/hf";

// A fresh, absent path under the test's temporary directory.
std::string OutDir(const std::string& name) {
  const std::string dir =
      ::testing::TempDir() + "/export_" + name + "_" + std::to_string(::getpid());
  fs::remove_all(dir);
  return dir;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// Logits on the fixture's reference batch (padding included: both models
// compute the same function there too).
torch::Tensor Logits(Transformer& model, const std::string& fixture) {
  absl::StatusOr<NamedTensors> ref =
      LoadSafetensors(kFixtures + "/" + fixture + "/reference.safetensors");
  EXPECT_TRUE(ref.ok()) << ref.status();
  std::map<std::string, torch::Tensor> batch(ref->begin(), ref->end());
  torch::NoGradGuard no_grad;
  return model->forward(batch["input_ids"], batch["position_ids"],
                        batch["attention_mask"].to(torch::kBool));
}

// The dtypes of the stored tensors of an export's (single-file) weights.
std::set<c10::ScalarType> StoredDtypes(const std::string& dir) {
  absl::StatusOr<NamedTensors> weights = LoadHfWeights(dir);
  EXPECT_TRUE(weights.ok()) << weights.status();
  std::set<c10::ScalarType> dtypes;
  for (const auto& [name, tensor] : *weights) dtypes.insert(tensor.scalar_type());
  return dtypes;
}

HfExportOptions Architecture(HfArchitecture architecture) {
  HfExportOptions options;
  options.architecture = architecture;
  return options;
}

class ExportFixtureTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ExportFixtureTest, ReloadsAsTheSameModel) {
  const std::string fixture = kFixtures + "/" + GetParam();
  absl::StatusOr<HfModel> source = LoadHfModel(fixture);
  ASSERT_TRUE(source.ok()) << source.status();
  Transformer model = LoadHfTransformer(fixture);
  ASSERT_TRUE(model);
  const std::string out = OutDir(GetParam());
  HfExportOptions options = HfExportOptionsFor(source->dir, source->config);
  const bool sharded = std::string(GetParam()) == "llama3_gqa";
  if (sharded) options.max_shard_bytes = 64 << 10;  // its 107 KB in two shards
  ASSERT_TRUE(ExportHfModel(model, options, out).ok());

  absl::StatusOr<HfConfig> config = ReadHfConfig(out);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture, source->config.architecture);
  EXPECT_EQ(config->dtype, source->config.dtype);
  EXPECT_TRUE(
      google::protobuf::util::MessageDifferencer::Equals(config->model, source->config.model))
      << config->model.DebugString() << " vs " << source->config.model.DebugString();
  EXPECT_EQ(fs::exists(out + "/model.safetensors.index.json"), sharded);
  EXPECT_EQ(fs::exists(out + "/model-00002-of-00002.safetensors"), sharded);
  Transformer reloaded = LoadHfTransformer(out);
  ASSERT_TRUE(reloaded);
  EXPECT_TRUE(torch::equal(Logits(reloaded, GetParam()), Logits(model, GetParam())));
  fs::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ExportFixtureTest,
                         ::testing::Values("llama3_gqa", "llama_tied", "qwen2", "qwen3", "mistral",
                                           "qwen3_moe", "mixtral"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

// A tied model's export holds no lm_head.weight: transformers ties it.
TEST(HfExport, TiedModelHasNoLmHead) {
  const std::string out = OutDir("tied");
  Transformer model = LoadHfTransformer(kFixtures + "/qwen2");
  ASSERT_TRUE(ExportHfModel(model, Architecture(HfArchitecture::kQwen2), out).ok());
  absl::StatusOr<NamedTensors> weights = LoadSafetensors(out + "/model.safetensors");
  ASSERT_TRUE(weights.ok()) << weights.status();
  for (const auto& [name, tensor] : *weights) EXPECT_NE(name, "lm_head.weight");
  fs::remove_all(out);
}

// bfloat16 storage: written as bf16, read back as the rounded model, and a
// bf16 source is exported as bf16 again.
TEST(HfExport, KeepsTheSourceDtype) {
  Transformer model = LoadHfTransformer(kFixtures + "/llama_tied");
  ASSERT_TRUE(model);
  const std::string bf16 = OutDir("bf16");
  HfExportOptions options;
  options.dtype = c10::ScalarType::BFloat16;
  ASSERT_TRUE(ExportHfModel(model, options, bf16).ok());
  EXPECT_EQ(StoredDtypes(bf16), std::set<c10::ScalarType>{c10::ScalarType::BFloat16});
  EXPECT_THAT(Slurp(bf16 + "/config.json"), HasSubstr("\"dtype\": \"bfloat16\""));

  absl::StatusOr<HfModel> source = LoadHfModel(bf16);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ(source->config.dtype, c10::ScalarType::BFloat16);
  Transformer reloaded = LoadHfTransformer(bf16);
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, tensor] : model->NamedWeights()) {
      tensor.copy_(tensor.to(torch::kBFloat16));
    }
  }
  EXPECT_TRUE(torch::equal(Logits(reloaded, "llama_tied"), Logits(model, "llama_tied")));

  const std::string again = OutDir("bf16_again");
  ASSERT_TRUE(ExportHfModel(reloaded, HfExportOptionsFor(source->dir, source->config), again).ok());
  EXPECT_EQ(StoredDtypes(again), std::set<c10::ScalarType>{c10::ScalarType::BFloat16});
  fs::remove_all(bf16);
  fs::remove_all(again);
}

TEST(HfExport, BuiltinModelIsALlama) {
  absl::StatusOr<Transformer> model =
      NewPolicy(testing::SmallConfig(), trellis::v1::LoraConfig(), 40, /*seed=*/3);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::string out = OutDir("builtin");
  HfExportOptions options;
  options.token_ids.bos = 1;
  options.token_ids.eos = {2, 3};
  ASSERT_TRUE(ExportHfModel(*model, options, out).ok());
  absl::StatusOr<HfConfig> config = ReadHfConfig(out);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture, HfArchitecture::kLlama);
  EXPECT_EQ(config->model.vocab_size(), 40);
  EXPECT_EQ(config->model.max_position_embeddings(), testing::SmallConfig().max_seq_len());
  EXPECT_THAT(Slurp(out + "/generation_config.json"), HasSubstr("\"eos_token_id\": [\n    2,"));
  Transformer reloaded = LoadHfTransformer(out);
  ASSERT_TRUE(reloaded);
  const torch::Tensor tokens = torch::randint(0, 40, {2, 9});
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(reloaded->forward(tokens), (*model)->forward(tokens)));
  fs::remove_all(out);
}

TEST(HfExport, CopiesTheTokenizerFiles) {
  const std::string tokenizer = OutDir("tokenizer_src");
  fs::create_directories(tokenizer);
  std::ofstream(tokenizer + "/tokenizer.json") << "{\"model\": {}}";
  std::ofstream(tokenizer + "/chat_template.jinja") << "{{ messages }}";
  std::ofstream(tokenizer + "/notes.txt") << "not a tokenizer file";
  Transformer model = LoadHfTransformer(kFixtures + "/llama_tied");
  const std::string out = OutDir("tokenizer");
  HfExportOptions options;
  options.tokenizer_dir = tokenizer;
  ASSERT_TRUE(ExportHfModel(model, options, out).ok());
  EXPECT_EQ(Slurp(out + "/tokenizer.json"), "{\"model\": {}}");
  EXPECT_EQ(Slurp(out + "/chat_template.jinja"), "{{ messages }}");
  EXPECT_FALSE(fs::exists(out + "/notes.txt"));
  EXPECT_FALSE(fs::exists(out + "/tokenizer.model"));
  fs::remove_all(out);
  fs::remove_all(tokenizer);
}

// No temporary directory is left beside `out` after a failed export.
void ExpectNoLeftovers(const std::string& out) {
  for (const auto& entry : fs::directory_iterator(fs::path(out).parent_path())) {
    EXPECT_THAT(entry.path().string(), ::testing::Not(HasSubstr(out + ".tmp")));
  }
}

TEST(HfExportErrors, UnwritableOutputNamesThePath) {
  const std::string file = OutDir("a_file");
  std::ofstream(file) << "x";
  Transformer model = LoadHfTransformer(kFixtures + "/llama_tied");
  const absl::Status s = ExportHfModel(model, {}, file + "/model");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(file + "/model"));
  fs::remove(file);
}

TEST(HfExportErrors, NonEmptyDirectoryIsKept) {
  const std::string out = OutDir("taken");
  fs::create_directories(out);
  std::ofstream(out + "/mine.txt") << "keep";
  Transformer model = LoadHfTransformer(kFixtures + "/llama_tied");
  const absl::Status s = ExportHfModel(model, {}, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(s.message(), HasSubstr(out + ": exists and is not empty"));
  EXPECT_EQ(Slurp(out + "/mine.txt"), "keep");
  EXPECT_FALSE(fs::exists(out + "/config.json"));
  ExpectNoLeftovers(out);
  fs::remove_all(out);
}

TEST(HfExportErrors, MissingTokenizerDirWritesNothing) {
  const std::string out = OutDir("no_tokenizer");
  Transformer model = LoadHfTransformer(kFixtures + "/llama_tied");
  HfExportOptions options;
  options.tokenizer_dir = "/nonexistent/tok";
  const absl::Status s = ExportHfModel(model, options, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("/nonexistent/tok"));
  EXPECT_FALSE(fs::exists(out));
  ExpectNoLeftovers(out);
}

TEST(HfExportErrors, ArchitectureMustExpressTheModel) {
  Transformer qwen3 = LoadHfTransformer(kFixtures + "/qwen3");
  const std::string out = OutDir("inexpressible");
  absl::Status s = ExportHfModel(qwen3, Architecture(HfArchitecture::kLlama), out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("LlamaForCausalLM: the model has qk_norm true"));
  Transformer llama = LoadHfTransformer(kFixtures + "/llama_tied");
  s = ExportHfModel(llama, Architecture(HfArchitecture::kQwen2), out);
  EXPECT_THAT(s.message(), HasSubstr("attention_bias false"));
  // Experts only in a mixture-of-experts family, and only renormalized
  // ones in Mixtral.
  Transformer moe = LoadHfTransformer(kFixtures + "/mixtral");
  s = ExportHfModel(moe, Architecture(HfArchitecture::kMistral), out);
  EXPECT_THAT(s.message(), HasSubstr("MistralForCausalLM: the model has num_experts 4"));
  s = ExportHfModel(LoadHfTransformer(kFixtures + "/mistral"),
                    Architecture(HfArchitecture::kMixtral), out);
  EXPECT_THAT(s.message(), HasSubstr("num_experts 0"));
  trellis::v1::ModelConfig unnormalized = moe->config();
  unnormalized.set_normalize_expert_weights(false);
  const std::unique_lock<std::recursive_mutex> draws = LockInitialDraws();
  s = ExportHfModel(Transformer(unnormalized, 128), Architecture(HfArchitecture::kMixtral), out);
  EXPECT_THAT(s.message(), HasSubstr("normalize_expert_weights false"));
  EXPECT_FALSE(fs::exists(out));
}

// A mixture of experts is written one matrix per expert, under the
// family's names (transformers reads them back: scripts/check_hf_export.sh).
TEST(HfExport, ExpertsAreWrittenInTheReleasedLayout) {
  for (const std::string fixture : {"qwen3_moe", "mixtral"}) {
    Transformer model = LoadHfTransformer(kFixtures + "/" + fixture);
    absl::StatusOr<HfModel> source = LoadHfModel(kFixtures + "/" + fixture);
    ASSERT_TRUE(source.ok()) << source.status();
    const std::string out = OutDir("released_" + fixture);
    ASSERT_TRUE(ExportHfModel(model, HfExportOptionsFor(source->dir, source->config), out).ok());
    absl::StatusOr<NamedTensors> written = LoadSafetensors(out + "/model.safetensors");
    ASSERT_TRUE(written.ok()) << written.status();
    std::set<std::string> names, want;
    for (const auto& [name, tensor] : *written) names.insert(name);
    for (const auto& [name, tensor] : source->weights) want.insert(name);
    EXPECT_EQ(names, want) << fixture;
    fs::remove_all(out);
  }
}

TEST(HfExportErrors, ScalarHeadAndShardSizeAreRefused) {
  const std::unique_lock<std::recursive_mutex> draws = LockInitialDraws();
  Transformer critic(testing::SmallConfig(), 40, Head::kScalar);
  EXPECT_THAT(ExportHfModel(critic, {}, OutDir("critic")).message(), HasSubstr("scalar head"));
  Transformer model(testing::SmallConfig(), 40);
  HfExportOptions options;
  options.max_shard_bytes = 0;
  EXPECT_THAT(ExportHfModel(model, options, OutDir("shard")).message(),
              HasSubstr("max_shard_bytes must be positive"));
}

}  // namespace
}  // namespace trellis::model
