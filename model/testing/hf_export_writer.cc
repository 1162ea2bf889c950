// Writes Trellis's exports of the Hugging Face fixtures and Trellis's logits,
// for scripts/check_hf_export.py to load with transformers and peft:
//
//   hf_export_writer FIXTURES_DIR OUT_DIR
//
// One folder per case in OUT_DIR, each with trellis.safetensors (the
// fixture's batch, input_ids, attention_mask and position_ids, and the
// logits Trellis computes on it, float32) and model/, the export
// (ExportHfModel); LoRA cases add adapter/ (ExportPeftAdapters, over the
// fixture as base) and their model/ holds the merged weights. Cases: every
// fixture in float32 (llama3_gqa in shards), llama_tied in bfloat16, and
// random adapters on qwen2 (every projection), mistral (q_proj and v_proj)
// and qwen3_moe (its attention: q_proj and o_proj).
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <string>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "model/hf_export.h"
#include "model/hf_model.h"
#include "model/policy.h"
#include "model/safetensors.h"

namespace trellis::model {
namespace {

struct Case {
  std::string name;
  std::string fixture;
  c10::ScalarType dtype = c10::ScalarType::Float;
  int64_t max_shard_bytes = int64_t{5} << 30;
  // LoRA rank (0: none), alpha and targets.
  trellis::v1::LoraConfig lora;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (const char* name :
       {"llama3_gqa", "llama_tied", "qwen2", "qwen3", "mistral", "qwen3_moe", "mixtral"}) {
    cases.push_back({name, name});
  }
  cases[0].max_shard_bytes = 64 << 10;  // two shards
  cases.push_back({"llama_tied_bf16", "llama_tied", c10::ScalarType::BFloat16});
  Case qwen2{"qwen2_lora", "qwen2"};
  qwen2.lora.set_rank(4);
  qwen2.lora.set_alpha(8);
  for (int p = trellis::v1::LoraConfig::Projection_MIN;
       p <= trellis::v1::LoraConfig::Projection_MAX; ++p) {
    qwen2.lora.add_target_modules(static_cast<trellis::v1::LoraConfig::Projection>(p));
  }
  cases.push_back(qwen2);
  Case mistral{"mistral_lora", "mistral"};
  mistral.lora.set_rank(2);
  mistral.lora.set_alpha(16);
  cases.push_back(mistral);
  Case moe{"qwen3_moe_lora", "qwen3_moe"};
  moe.lora.set_rank(4);
  moe.lora.set_alpha(8);
  moe.lora.add_target_modules(trellis::v1::LoraConfig::Q_PROJ);
  moe.lora.add_target_modules(trellis::v1::LoraConfig::O_PROJ);
  cases.push_back(moe);
  return cases;
}

// The fixture's model, with `lora`'s adapters drawn at random (B too, so
// that they change the output).
absl::StatusOr<Transformer> Build(const HfModel& hf, const trellis::v1::LoraConfig& lora) {
  if (lora.rank() == 0) return NewHfTransformer(hf);
  Transformer model{nullptr};
  {
    const std::unique_lock<std::recursive_mutex> draws = LockInitialDraws();
    model = Transformer(hf.config.model, hf.config.model.vocab_size(), Head::kLanguageModel, lora);
    torch::manual_seed(7);
    torch::NoGradGuard no_grad;
    for (auto& [name, tensor] : model->AdapterWeights()) tensor.normal_(0, 0.2);
  }
  if (absl::Status s = FillFromHfDir(hf.dir, model); !s.ok()) return s;
  return model;
}

// Rounds every weight to `dtype`, as the export stores them.
void RoundWeights(Transformer& model, c10::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  for (auto& [name, tensor] : model->NamedWeights()) tensor.copy_(tensor.to(dtype));
}

absl::Status WriteCase(const Case& c, const std::string& fixtures, const std::string& out) {
  const std::string fixture = absl::StrCat(fixtures, "/", c.fixture);
  absl::StatusOr<HfModel> hf = LoadHfModel(fixture);
  if (!hf.ok()) return hf.status();
  absl::StatusOr<Transformer> model = Build(*hf, c.lora);
  if (!model.ok()) return model.status();
  RoundWeights(*model, c.dtype);

  HfExportOptions options = HfExportOptionsFor(hf->dir, hf->config);
  options.dtype = c.dtype;
  options.max_shard_bytes = c.max_shard_bytes;
  options.token_ids.bos = 1;
  options.token_ids.eos = {2};
  options.token_ids.pad = 0;
  const std::string dir = absl::StrCat(out, "/", c.name);
  if (absl::Status s = ExportHfModel(*model, options, dir + "/model"); !s.ok()) return s;
  if (c.lora.rank() > 0) {
    PeftExportOptions peft;
    peft.base_model_name_or_path = fixture;
    if (absl::Status s = ExportPeftAdapters(*model, c.lora, peft, dir + "/adapter"); !s.ok()) {
      return s;
    }
  }

  absl::StatusOr<NamedTensors> ref = LoadSafetensors(fixture + "/reference.safetensors");
  if (!ref.ok()) return ref.status();
  std::map<std::string, torch::Tensor> batch(ref->begin(), ref->end());
  torch::NoGradGuard no_grad;
  const torch::Tensor logits = (*model)->forward(batch["input_ids"], batch["position_ids"],
                                                 batch["attention_mask"].to(torch::kBool));
  return SaveSafetensors(dir + "/trellis.safetensors", {{"input_ids", batch["input_ids"]},
                                                        {"attention_mask", batch["attention_mask"]},
                                                        {"position_ids", batch["position_ids"]},
                                                        {"logits", logits.contiguous()}});
}

}  // namespace
}  // namespace trellis::model

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: hf_export_writer FIXTURES_DIR OUT_DIR\n";
    return 2;
  }
  const std::string fixtures = std::filesystem::absolute(argv[1]).string();
  for (const trellis::model::Case& c : trellis::model::Cases()) {
    if (absl::Status s = trellis::model::WriteCase(c, fixtures, argv[2]); !s.ok()) {
      std::cerr << c.name << ": " << s << "\n";
      return 1;
    }
    std::cout << "wrote " << c.name << "\n";
  }
  return 0;
}
