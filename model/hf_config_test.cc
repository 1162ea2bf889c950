#include "model/hf_config.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trellis/v1/job.pb.h"

namespace trellis::model {
namespace {

using ::testing::HasSubstr;
using RopeScaling = trellis::v1::ModelConfig::RopeScaling;

// A small Llama config.json; `extra` fields (", \"key\": value") follow,
// replacing those of the same name.
std::string Llama(const std::string& extra = "") {
  return R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 64, "hidden_size": 32,
             "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
             "max_position_embeddings": 128, "torch_dtype": "bfloat16")" +
         extra + "}";
}

absl::Status ParseError(const std::string& text) {
  absl::StatusOr<HfConfig> c = ParseHfConfig(text, "m/config.json");
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  return c.status();
}

TEST(ParseHfConfig, ReadsTheShapeOfTransformers4Layout) {
  absl::StatusOr<HfConfig> c = ParseHfConfig(Llama(), "m/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, HfArchitecture::kLlama);
  EXPECT_EQ(c->dtype, c10::ScalarType::BFloat16);
  const trellis::v1::ModelConfig& m = c->model;
  EXPECT_EQ(m.vocab_size(), 64);
  EXPECT_EQ(m.d_model(), 32);
  EXPECT_EQ(m.d_ff(), 48);
  EXPECT_EQ(m.n_layers(), 2);
  EXPECT_EQ(m.n_heads(), 4);
  EXPECT_EQ(m.n_kv_heads(), 2);
  EXPECT_EQ(m.head_dim(), 0);
  EXPECT_FLOAT_EQ(m.rope_theta(), 500000.0f);
  EXPECT_FLOAT_EQ(m.rms_norm_eps(), 1e-5f);
  EXPECT_EQ(m.max_position_embeddings(), 128);
  EXPECT_FALSE(m.tie_embeddings());
  EXPECT_FALSE(m.attention_bias());
  EXPECT_FALSE(m.qk_norm());
  EXPECT_EQ(m.rope_scaling().type(), RopeScaling::NONE);
}

TEST(ParseHfConfig, ReadsLlama3RopeScalingInEitherLayout) {
  const std::string v4 = R"(, "rope_scaling": {"rope_type": "llama3", "factor": 32.0,
      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192})";
  const std::string v5 = R"(, "rope_parameters": {"rope_type": "llama3", "factor": 32.0,
      "low_freq_factor": 1.0, "high_freq_factor": 4.0, "rope_theta": 250000.0,
      "original_max_position_embeddings": 8192})";
  for (const std::string& extra : {v4, v5}) {
    absl::StatusOr<HfConfig> c = ParseHfConfig(Llama(extra), "m/config.json");
    ASSERT_TRUE(c.ok()) << c.status();
    const RopeScaling& s = c->model.rope_scaling();
    EXPECT_EQ(s.type(), RopeScaling::LLAMA3);
    EXPECT_FLOAT_EQ(s.factor(), 32.0f);
    EXPECT_FLOAT_EQ(s.high_freq_factor(), 4.0f);
    EXPECT_EQ(s.original_max_position_embeddings(), 8192);
  }
  EXPECT_FLOAT_EQ(ParseHfConfig(Llama(v5), "m")->model.rope_theta(), 250000.0f);
}

TEST(ParseHfConfig, UnsupportedArchitectureListsTheSupported) {
  absl::Status s = ParseError(R"({"architectures": ["GPT2LMHeadModel"], "vocab_size": 8})");
  EXPECT_THAT(s.message(), HasSubstr("m/config.json: architecture 'GPT2LMHeadModel' is not "
                                     "supported; supported: LlamaForCausalLM, Qwen2ForCausalLM, "
                                     "Qwen3ForCausalLM, MistralForCausalLM"));
  EXPECT_THAT(ParseError(R"({"vocab_size": 8})").message(), HasSubstr("architectures:"));
}

TEST(ParseHfConfig, RefusesWhatWouldChangeTheFunction) {
  EXPECT_THAT(ParseError(Llama(R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4})"))
                  .message(),
              HasSubstr("rope_scaling: rope type 'yarn' is not supported; supported: default, "
                        "llama3"));
  EXPECT_THAT(ParseError(Llama(R"(, "hidden_act": "gelu")")).message(),
              HasSubstr("hidden_act 'gelu' is not supported; supported: silu"));
  EXPECT_THAT(ParseError(Llama(R"(, "mlp_bias": true)")).message(), HasSubstr("mlp_bias"));
  EXPECT_THAT(ParseError(Llama(R"(, "attention_bias": true)")).message(),
              HasSubstr("attention_bias true"));
  EXPECT_THAT(ParseError(Llama(R"(, "quantization_config": {"bits": 4})")).message(),
              HasSubstr("quantization_config is not supported"));
  EXPECT_THAT(ParseError(Llama(R"(, "dtype": "float8_e4m3fn")")).message(),
              HasSubstr("dtype 'float8_e4m3fn' is not supported"));
  EXPECT_THAT(ParseError(Llama(R"(, "partial_rotary_factor": 0.5)")).message(),
              HasSubstr("partial_rotary_factor"));
  const std::string qwen2 = R"({"architectures": ["Qwen2ForCausalLM"], "vocab_size": 64,
      "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
      "num_attention_heads": 4, "use_sliding_window": true})";
  EXPECT_THAT(ParseError(qwen2).message(), HasSubstr("use_sliding_window true"));
}

TEST(ParseHfConfig, BadFieldsNameThemselves) {
  EXPECT_THAT(ParseError(Llama(R"(, "num_hidden_layers": "two")")).message(),
              HasSubstr("num_hidden_layers: expected a positive integer, found \"two\""));
  EXPECT_THAT(ParseError(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 8})")
                  .message(),
              HasSubstr("required field hidden_size is missing"));
  EXPECT_THAT(ParseError(Llama(R"(, "num_key_value_heads": 3)")).message(),
              HasSubstr("num_key_value_heads 3 does not divide num_attention_heads 4"));
  EXPECT_THAT(ParseError("[1, 2]").message(), HasSubstr("not a JSON object"));
}

TEST(ParseHfConfig, MistralSlidingWindowCapsPositions) {
  const std::string mistral = R"({"architectures": ["MistralForCausalLM"], "vocab_size": 64,
      "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
      "num_attention_heads": 4, "max_position_embeddings": 32768, "sliding_window": 4096})";
  absl::StatusOr<HfConfig> c = ParseHfConfig(mistral, "m");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.max_position_embeddings(), 4096);
  EXPECT_EQ(c->model.n_kv_heads(), 4);
}

// A directory holding Llama(extra) as config.json.
std::string ModelDir(const std::string& name, const std::string& extra = "") {
  const std::string dir = ::testing::TempDir() + "/" + name;
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << Llama(extra);
  return dir;
}

TEST(ResolveHfModel, TheShapeComesFromConfigJsonAndTheJobKeepsItsOwnFields) {
  trellis::v1::ModelConfig m;
  m.set_path(ModelDir("resolve_ok"));
  m.set_max_seq_len(64);
  m.set_d_model(32);  // agrees with config.json
  ASSERT_TRUE(ResolveHfModel(&m).ok());
  EXPECT_EQ(m.vocab_size(), 64);
  EXPECT_EQ(m.d_model(), 32);
  EXPECT_EQ(m.d_ff(), 48);
  EXPECT_EQ(m.n_kv_heads(), 2);
  EXPECT_EQ(m.max_seq_len(), 64);
  EXPECT_EQ(m.path(), ::testing::TempDir() + "/resolve_ok");
  const std::string once = m.SerializeAsString();
  ASSERT_TRUE(ResolveHfModel(&m).ok());  // idempotent
  EXPECT_EQ(m.SerializeAsString(), once);
  // A resolved job written out with every default (OUT/job.yaml) reads back
  // the same: fields at their defaults agree with fields config.json omits.
  m.mutable_rope_scaling();
  m.set_attention_bias(false);
  ASSERT_TRUE(ResolveHfModel(&m).ok());

  trellis::v1::ModelConfig plain;
  ASSERT_TRUE(ResolveHfModel(&plain).ok());
  EXPECT_EQ(plain.d_model(), 128);  // no path: Trellis's own model
}

TEST(ResolveHfModel, DisagreementsAndLimitsNameTheField) {
  trellis::v1::ModelConfig m;
  m.set_path(ModelDir("resolve_bad"));
  m.set_n_layers(4);
  absl::Status s = ResolveHfModel(&m);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("model.n_layers: the job has {n_layers: 4} but"));
  EXPECT_THAT(s.message(), HasSubstr("resolve_bad/config.json gives {n_layers: 2}"));

  m.Clear();
  m.set_path(ModelDir("resolve_long"));
  m.set_max_seq_len(256);
  EXPECT_THAT(ResolveHfModel(&m).message(),
              HasSubstr("model.max_seq_len 256 exceeds"));

  m.Clear();
  m.set_path(::testing::TempDir() + "/no_such_model");
  s = ResolveHfModel(&m);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("model.path: "));
  EXPECT_THAT(s.message(), HasSubstr("no_such_model/config.json"));
}

// Mixtures of experts: transformers' defaults for absent fields, and a
// refusal naming the field for what Trellis would compute otherwise.
const char kQwen3Moe[] = R"(, "architectures": ["Qwen3MoeForCausalLM"], "num_experts": 4,
    "num_experts_per_tok": 2, "moe_intermediate_size": 16)";
const char kMixtral[] = R"(, "architectures": ["MixtralForCausalLM"], "num_local_experts": 4)";

TEST(ParseHfConfig, ReadsTheExperts) {
  absl::StatusOr<HfConfig> c = ParseHfConfig(Llama(kQwen3Moe), "m/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, HfArchitecture::kQwen3Moe);
  EXPECT_EQ(c->model.num_experts(), 4);
  EXPECT_EQ(c->model.expert_d_ff(), 16);
  EXPECT_FALSE(c->model.normalize_expert_weights());  // norm_topk_prob's default
  EXPECT_FLOAT_EQ(c->model.router_aux_loss_coef(), 0.001f);
  c = ParseHfConfig(Llama(std::string(kMixtral) + R"(, "num_experts_per_tok": 1)"), "m");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.experts_per_token(), 1);
  EXPECT_EQ(c->model.expert_d_ff(), 0);  // intermediate_size, d_ff, is the experts'
  EXPECT_TRUE(c->model.normalize_expert_weights());
}

TEST(ParseHfConfig, RefusesWhatTheExpertsCannotComputeTheSame) {
  const std::pair<std::string, std::string> cases[] = {
      {std::string(kQwen3Moe) + R"(, "mlp_only_layers": [1])", "mlp_only_layers [1]"},
      {std::string(kQwen3Moe) + R"(, "decoder_sparse_step": 2)", "decoder_sparse_step 2"},
      {std::string(kQwen3Moe) + R"(, "shared_expert_intermediate_size": 8)",
       "shared_expert_intermediate_size 8"},
      {std::string(kMixtral) + R"(, "router_jitter_noise": 0.1)", "router_jitter_noise"},
      {std::string(kMixtral) + R"(, "num_experts_per_tok": 5)", "num_experts_per_tok"},
  };
  for (const auto& [extra, field] : cases) {
    EXPECT_THAT(ParseError(Llama(extra)).message(), HasSubstr(field)) << extra;
  }
  EXPECT_TRUE(ParseHfConfig(Llama(std::string(kQwen3Moe) + R"(, "mlp_only_layers": [])"), "m")
                  .ok());
}

TEST(ResolveHfModel, AMixtralWindowShorterThanTheJobIsNamed) {
  trellis::v1::ModelConfig m;
  m.set_path(ModelDir("resolve_mixtral", std::string(kMixtral) + R"(, "sliding_window": 16)"));
  m.set_max_seq_len(32);
  EXPECT_THAT(ResolveHfModel(&m).message(),
              HasSubstr("model.max_seq_len 32 exceeds " + m.path() +
                        "/config.json's sliding_window 16"));
  m.set_max_seq_len(16);
  EXPECT_TRUE(ResolveHfModel(&m).ok());
}

}  // namespace
}  // namespace trellis::model
