// PEFT adapter exports (ExportPeftAdapters) and a LoRA policy exported as
// plain weights with its adapters merged (ExportHfModel).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/hf_export.h"
#include "model/hf_model.h"
#include "model/policy.h"
#include "model/safetensors.h"
#include "model/testing/small_model.h"

namespace trellis::model {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Projection = trellis::v1::LoraConfig::Projection;

std::string PeftOutDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/peft_" + name + "_" + std::to_string(::getpid());
  fs::remove_all(dir);
  return dir;
}

trellis::v1::LoraConfig Lora(int rank, float alpha, std::vector<Projection> targets = {}) {
  trellis::v1::LoraConfig lora;
  lora.set_rank(rank);
  lora.set_alpha(alpha);
  for (Projection p : targets) lora.add_target_modules(p);
  return lora;
}

// The small model with `lora`'s adapters, A and B drawn so that they count.
Transformer LoraModel(const trellis::v1::LoraConfig& lora) {
  absl::StatusOr<Transformer> model = NewPolicy(testing::SmallConfig(), lora, 40, /*seed=*/5);
  EXPECT_TRUE(model.ok()) << model.status();
  torch::NoGradGuard no_grad;
  for (auto& [name, tensor] : (*model)->AdapterWeights()) tensor.normal_(0, 0.3);
  return *model;
}

TEST(PeftExport, WritesPeftConfigAndNames) {
  const trellis::v1::LoraConfig lora = Lora(2, 16);
  Transformer model = LoraModel(lora);
  const std::string out = PeftOutDir("adapter");
  PeftExportOptions options;
  options.base_model_name_or_path = "org/base";
  ASSERT_TRUE(ExportPeftAdapters(model, lora, options, out).ok());

  std::ifstream in(out + "/adapter_config.json");
  const nlohmann::json config = nlohmann::json::parse(in);
  EXPECT_EQ(config["peft_type"], "LORA");
  EXPECT_EQ(config["task_type"], "CAUSAL_LM");
  EXPECT_EQ(config["r"], 2);
  EXPECT_EQ(config["lora_alpha"], 16.0);
  EXPECT_EQ(config["bias"], "none");
  EXPECT_EQ(config["use_rslora"], false);  // scaling alpha / r, as model/lora.h
  EXPECT_EQ(config["base_model_name_or_path"], "org/base");
  EXPECT_THAT(config["target_modules"].get<std::vector<std::string>>(),
              ElementsAre("q_proj", "v_proj"));

  absl::StatusOr<NamedTensors> stored = LoadSafetensors(out + "/adapter_model.safetensors");
  ASSERT_TRUE(stored.ok()) << stored.status();
  std::map<std::string, torch::Tensor> by_name(stored->begin(), stored->end());
  const NamedTensors adapters = model->AdapterWeights();
  ASSERT_EQ(by_name.size(), adapters.size());
  for (const auto& [name, tensor] : adapters) {
    const std::string peft_name = "base_model.model." + name;
    ASSERT_EQ(by_name.count(peft_name), 1u) << peft_name;
    EXPECT_TRUE(torch::equal(by_name[peft_name], tensor));
  }
  EXPECT_EQ(by_name.count("base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight"), 1u);
  fs::remove_all(out);
}

TEST(PeftExport, BfloatAdapters) {
  const trellis::v1::LoraConfig lora = Lora(4, 8, {trellis::v1::LoraConfig::DOWN_PROJ});
  Transformer model = LoraModel(lora);
  const std::string out = PeftOutDir("bf16");
  PeftExportOptions options;
  options.dtype = c10::ScalarType::BFloat16;
  ASSERT_TRUE(ExportPeftAdapters(model, lora, options, out).ok());
  absl::StatusOr<NamedTensors> stored = LoadSafetensors(out + "/adapter_model.safetensors");
  ASSERT_TRUE(stored.ok()) << stored.status();
  for (const auto& [name, tensor] : *stored) {
    EXPECT_EQ(tensor.scalar_type(), c10::ScalarType::BFloat16) << name;
  }
  fs::remove_all(out);
}

// The merged export is a plain model computing the LoRA policy's function.
TEST(PeftExport, MergedModelMatchesThePolicy) {
  const trellis::v1::LoraConfig lora =
      Lora(2, 4, {trellis::v1::LoraConfig::Q_PROJ, trellis::v1::LoraConfig::UP_PROJ});
  Transformer model = LoraModel(lora);
  const std::string out = PeftOutDir("merged");
  ASSERT_TRUE(ExportHfModel(model, HfExportOptions(), out).ok());
  absl::StatusOr<HfModel> hf = LoadHfModel(out);
  ASSERT_TRUE(hf.ok()) << hf.status();
  absl::StatusOr<Transformer> merged = NewHfTransformer(*hf);
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_FALSE((*merged)->has_adapters());
  const torch::Tensor tokens = torch::randint(0, 40, {2, 11});
  torch::NoGradGuard no_grad;
  const torch::Tensor want = model->forward(tokens);
  EXPECT_LT(((*merged)->forward(tokens) - want).abs().max().item<float>(), 1e-4f);
  Transformer base = LoraModel(Lora(0, 0));
  EXPECT_GT((base->forward(tokens) - want).abs().max().item<float>(),
            1e-2f);  // adapters count
  fs::remove_all(out);
}

TEST(PeftExportErrors, NoAdapters) {
  Transformer model = LoraModel(Lora(0, 16));
  const std::string out = PeftOutDir("none");
  const absl::Status s = ExportPeftAdapters(model, Lora(2, 16), PeftExportOptions(), out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("no adapters to export"));
  EXPECT_FALSE(fs::exists(out));
}

TEST(PeftExportErrors, ConfigMustDescribeTheAdapters) {
  Transformer model = LoraModel(Lora(2, 16));  // q_proj and v_proj
  const std::string out = PeftOutDir("mismatch");
  absl::Status s = ExportPeftAdapters(model, Lora(2, 16, {trellis::v1::LoraConfig::Q_PROJ}),
                                      PeftExportOptions(), out);
  EXPECT_THAT(s.message(), HasSubstr("on v_proj, which lora.target_modules lacks"));
  s = ExportPeftAdapters(model,
                         Lora(2, 16,
                              {trellis::v1::LoraConfig::Q_PROJ, trellis::v1::LoraConfig::V_PROJ,
                               trellis::v1::LoraConfig::K_PROJ}),
                         PeftExportOptions(), out);
  EXPECT_THAT(s.message(), HasSubstr("names k_proj, but the model has no adapter on it"));
  s = ExportPeftAdapters(model, Lora(4, 16), PeftExportOptions(), out);
  EXPECT_THAT(s.message(), HasSubstr("not of lora.rank 4"));
  EXPECT_FALSE(fs::exists(out));
}

TEST(PeftExportErrors, UnwritableOutput) {
  const trellis::v1::LoraConfig lora = Lora(2, 16);
  Transformer model = LoraModel(lora);
  const std::string file = PeftOutDir("file");
  std::ofstream(file) << "x";
  const absl::Status s = ExportPeftAdapters(model, lora, PeftExportOptions(), file + "/adapter");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(file + "/adapter"));
  fs::remove(file);
}

}  // namespace
}  // namespace trellis::model
