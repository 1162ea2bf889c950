#ifndef TRELLIS_MODEL_HF_CONFIG_H_
#define TRELLIS_MODEL_HF_CONFIG_H_

// A Hugging Face config.json read into the model shape Trellis builds
// (ModelConfig). Both layouts transformers writes are read: version 4's
// (rope_theta and rope_scaling at the top, torch_dtype) and version 5's
// (rope_parameters, dtype). What would change the model's function and is
// not supported is refused, naming it and what is supported: another
// architecture, activation or rope type, biases on every attention
// projection or on the MLP, sliding-window attention that is switched on
// (Qwen2/Qwen3), quantization. Mistral's and Mixtral's sliding_window caps
// max_position_embeddings: within the window, attention is full. The
// mixtures of experts (Qwen3-MoE, Mixtral) are read into num_experts,
// experts_per_token, expert_d_ff, normalize_expert_weights and
// router_aux_loss_coef; a Qwen3-MoE with dense layers among the sparse ones
// (mlp_only_layers, decoder_sparse_step other than 1), shared experts or
// router jitter is refused.

#include <cstdint>
#include <string>

#include <c10/core/ScalarType.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trellis/v1/job.pb.h"

namespace trellis::model {

// config.json's "architectures" entry: LlamaForCausalLM, Qwen2ForCausalLM,
// Qwen3ForCausalLM, MistralForCausalLM, Qwen3MoeForCausalLM,
// MixtralForCausalLM.
enum class HfArchitecture { kLlama, kQwen2, kQwen3, kMistral, kQwen3Moe, kMixtral };

// Whether the family is a mixture of experts (Qwen3-MoE, Mixtral).
bool IsMoeArchitecture(HfArchitecture architecture);

struct HfConfig {
  HfArchitecture architecture = HfArchitecture::kLlama;
  // vocab_size, d_model, n_layers, n_heads, n_kv_heads, d_ff, head_dim,
  // rope_theta, rope_scaling, rms_norm_eps, tie_embeddings, attention_bias,
  // qk_norm, max_position_embeddings and the experts' fields as config.json
  // gives them; the job's fields (max_seq_len, init_checkpoint, init_std)
  // keep defaults.
  trellis::v1::ModelConfig model;
  // The sliding window (Mistral, Mixtral) that capped
  // model.max_position_embeddings; 0 when none did.
  int32_t sliding_window = 0;
  // The stored weights' dtype: float32, bfloat16 or float16 (float32 when
  // config.json names none).
  c10::ScalarType dtype = c10::ScalarType::Float;
};

// Parses config.json's text; `source` (its path) starts every error.
[[nodiscard]] absl::StatusOr<HfConfig> ParseHfConfig(absl::string_view json_text,
                                                     absl::string_view source);

// Reads and parses DIR/config.json.
[[nodiscard]] absl::StatusOr<HfConfig> ReadHfConfig(const std::string& dir);

// A job's model with config->path naming a Hugging Face directory gets its
// shape from DIR/config.json: every field but the job's own (path,
// max_seq_len, init_checkpoint, init_std) is replaced by config.json's. A
// shape field the job sets itself must agree, or the error names the field
// and both values; max_seq_len may not exceed max_position_embeddings.
// Idempotent; nothing to do when config->path is empty.
[[nodiscard]] absl::Status ResolveHfModel(trellis::v1::ModelConfig* config);

// config.json's names for `architecture`: its "architectures" entry
// ("LlamaForCausalLM") and its "model_type" ("llama").
absl::string_view HfArchitectureName(HfArchitecture architecture);
absl::string_view HfModelType(HfArchitecture architecture);

// config.json's name for a stored dtype ("float32", "bfloat16", "float16");
// empty for any other.
absl::string_view HfDtypeName(c10::ScalarType dtype);

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_HF_CONFIG_H_
