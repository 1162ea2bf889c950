#ifndef TRELLIS_MODEL_HF_EXPORT_H_
#define TRELLIS_MODEL_HF_EXPORT_H_

// A trained policy written back as a Hugging Face directory that
// transformers' AutoModelForCausalLM.from_pretrained loads, and its LoRA
// adapters as a directory that peft's PeftModel.from_pretrained loads onto
// the base; both compute Trellis's logits (scripts/check_hf_export.sh
// checks them with transformers and peft, docs/models.md "Export").
//
//   ExportHfModel(policy, HfExportOptionsFor(source.dir, source.config), "out/model");
//   PeftExportOptions peft;
//   peft.base_model_name_or_path = source.dir;
//   ExportPeftAdapters(policy, job.lora(), peft, "out/adapter");
//
// Each directory is written whole or not at all (model/export_dir.h) and
// never over a directory that has files in it; errors name the directory
// and the file at fault.

#include <cstdint>
#include <string>

#include <c10/core/ScalarType.h>

#include "absl/status/status.h"
#include "model/hf_config.h"
#include "model/hf_config_writer.h"
#include "model/hf_model.h"
#include "model/transformer.h"
#include "trellis/v1/job.pb.h"

namespace trellis::model {

struct HfExportOptions {
  // The family config.json names; for Trellis's built-in model (no Hugging
  // Face source) Llama, which computes the same function.
  HfArchitecture architecture = HfArchitecture::kLlama;
  // The stored dtype: float32, bfloat16 or float16. The weights are
  // converted to it from the model's (float32 while training).
  c10::ScalarType dtype = c10::ScalarType::Float;
  // config.json's and generation_config.json's special token ids.
  HfTokenIds token_ids;
  // A directory whose tokenizer files (tokenizer.json, tokenizer_config.json,
  // tokenizer.model, special_tokens_map.json, chat_template.jinja,
  // vocab.json, merges.txt, added_tokens.json: whichever exist) are copied;
  // empty copies none.
  std::string tokenizer_dir;
  // Weights above this many bytes are split into shards
  // model-0000i-of-0000N.safetensors under model.safetensors.index.json;
  // otherwise one model.safetensors.
  int64_t max_shard_bytes = int64_t{5} << 30;
};

// The options that export a model loaded from the Hugging Face directory
// `dir` (its config.json read as `config`) as the same family in its
// stored dtype, with its tokenizer files.
HfExportOptions HfExportOptionsFor(const std::string& dir, const HfConfig& config);

// Writes DIR: config.json (model/hf_config_writer.h), the weights under
// their Hugging Face names (a LoRA policy's with the adapters merged in,
// TransformerImpl::MergedWeights; a tied model's without lm_head.weight,
// which transformers ties on loading; a mixture of experts' experts one
// matrix each, as the family's released checkpoints hold them,
// model/hf_experts.h), generation_config.json and the
// tokenizer files. Fails for a model with a scalar head, one the
// architecture cannot express, a max_shard_bytes <= 0, a tokenizer_dir that
// does not exist, or an unwritable, non-empty or otherwise unusable DIR.
[[nodiscard]] absl::Status ExportHfModel(const Transformer& model, const HfExportOptions& options,
                                         const std::string& dir);

struct PeftExportOptions {
  // adapter_config.json's base_model_name_or_path: the base's directory or
  // Hub id.
  std::string base_model_name_or_path;
  // The adapters' stored dtype (float32, bfloat16 or float16).
  c10::ScalarType dtype = c10::ScalarType::Float;
};

// Writes DIR: adapter_config.json (peft_type LORA, task_type CAUSAL_LM, r
// and lora_alpha from `lora`, target_modules, bias none) and
// adapter_model.safetensors, the adapters under PEFT's names
// ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight").
// PEFT scales an adapter by lora_alpha / r, as model/lora.h does. Fails
// when `model` carries no adapters or other ones than `lora` describes
// (projections, rank), naming the tensor, and as ExportHfModel for DIR.
[[nodiscard]] absl::Status ExportPeftAdapters(const Transformer& model,
                                              const trellis::v1::LoraConfig& lora,
                                              const PeftExportOptions& options,
                                              const std::string& dir);

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_HF_EXPORT_H_
