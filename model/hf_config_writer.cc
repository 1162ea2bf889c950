#include "model/hf_config_writer.h"

#include <charconv>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "model/hf_config.h"
#include "trellis/v1/job.pb.h"

namespace trellis::model {
namespace {

using json = nlohmann::json;
using RopeScaling = trellis::v1::ModelConfig::RopeScaling;

// The double whose shortest decimal is the float's (1e-05 for 1e-5f, not
// 9.99999974737875e-06), so config.json reads as the source wrote it.
double Decimal(float value) {
  char text[32];
  const std::to_chars_result end = std::to_chars(text, text + sizeof(text) - 1, value);
  *end.ptr = '\0';
  return std::strtod(text, nullptr);
}

// What the architecture's config.json has no field for: a ModelConfig
// variant another family carries (empty when there is none).
std::string Inexpressible(HfArchitecture architecture, const trellis::v1::ModelConfig& m) {
  const bool qwen2 = architecture == HfArchitecture::kQwen2;
  const bool qwen3 =
      architecture == HfArchitecture::kQwen3 || architecture == HfArchitecture::kQwen3Moe;
  if (IsMoeArchitecture(architecture) != (m.num_experts() > 0)) {
    return m.num_experts() > 0 ? absl::StrCat("num_experts ", m.num_experts(),
                                              " (mixture of experts: Qwen3MoeForCausalLM, "
                                              "MixtralForCausalLM only)")
                               : "num_experts 0 (a dense MLP, not a mixture of experts)";
  }
  if (architecture == HfArchitecture::kMixtral && !m.normalize_expert_weights()) {
    return "normalize_expert_weights false (MixtralForCausalLM always renormalizes)";
  }
  if (m.attention_bias() != qwen2) {
    return qwen2 ? "attention_bias false (Qwen2ForCausalLM always has "
                   "query/key/value biases)"
                 : "attention_bias true (query/key/value biases: "
                   "Qwen2ForCausalLM only)";
  }
  if (m.qk_norm() && !qwen3) {
    return "qk_norm true (query/key norms: Qwen3ForCausalLM, Qwen3MoeForCausalLM only)";
  }
  if (!m.qk_norm() && qwen3) return "qk_norm false (Qwen3 always has query/key norms)";
  return "";
}

// rope_parameters (transformers 5) and rope_theta / rope_scaling (4).
void WriteRope(const trellis::v1::ModelConfig& m, json& out) {
  json parameters = {{"rope_theta", Decimal(m.rope_theta())}, {"rope_type", "default"}};
  json scaling = nullptr;
  if (m.rope_scaling().type() == RopeScaling::LLAMA3) {
    const RopeScaling& s = m.rope_scaling();
    scaling = {{"rope_type", "llama3"},
               {"factor", Decimal(s.factor())},
               {"low_freq_factor", Decimal(s.low_freq_factor())},
               {"high_freq_factor", Decimal(s.high_freq_factor())},
               {"original_max_position_embeddings", s.original_max_position_embeddings()}};
    parameters.update(scaling);
  }
  out["rope_parameters"] = parameters;
  out["rope_theta"] = parameters["rope_theta"];
  out["rope_scaling"] = scaling;
}

// The experts' fields of a mixture of experts; Mixtral's one width,
// intermediate_size, is its experts'.
void WriteExperts(HfArchitecture architecture, const trellis::v1::ModelConfig& m, json& out) {
  const int32_t width = m.expert_d_ff() > 0 ? m.expert_d_ff() : m.d_ff();
  out["num_experts_per_tok"] = m.experts_per_token();
  out["router_aux_loss_coef"] = Decimal(m.router_aux_loss_coef());
  out["output_router_logits"] = false;
  if (architecture == HfArchitecture::kMixtral) {
    out["num_local_experts"] = m.num_experts();
    out["intermediate_size"] = width;
    out["router_jitter_noise"] = 0.0;
    return;
  }
  out["num_experts"] = m.num_experts();
  out["moe_intermediate_size"] = width;
  out["norm_topk_prob"] = m.normalize_expert_weights();
  out["decoder_sparse_step"] = 1;
  out["mlp_only_layers"] = json::array();
}

void WriteIds(const HfTokenIds& ids, json& out) {
  if (ids.bos.has_value()) out["bos_token_id"] = *ids.bos;
  if (ids.eos.size() == 1) out["eos_token_id"] = ids.eos[0];
  if (ids.eos.size() > 1) out["eos_token_id"] = ids.eos;
  if (ids.pad.has_value()) out["pad_token_id"] = *ids.pad;
}

}  // namespace

absl::StatusOr<std::string> HfConfigJson(const HfConfig& config, const HfTokenIds& ids) {
  const trellis::v1::ModelConfig& m = config.model;
  const absl::string_view architecture = HfArchitectureName(config.architecture);
  if (const std::string what = Inexpressible(config.architecture, m); !what.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json for ", architecture, ": the model has ", what));
  }
  const absl::string_view dtype = HfDtypeName(config.dtype);
  if (dtype.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("config.json for ", architecture, ": dtype ",
                                                   std::string(c10::toString(config.dtype)),
                                                   " is not one of float32, bfloat16, float16"));
  }
  const int32_t max_positions =
      m.max_position_embeddings() > 0 ? m.max_position_embeddings() : m.max_seq_len();
  json out = {
      {"architectures", {std::string(architecture)}},
      {"model_type", std::string(HfModelType(config.architecture))},
      {"vocab_size", m.vocab_size()},
      {"hidden_size", m.d_model()},
      {"intermediate_size", m.d_ff()},
      {"num_hidden_layers", m.n_layers()},
      {"num_attention_heads", m.n_heads()},
      {"num_key_value_heads", m.n_kv_heads()},
      {"hidden_act", "silu"},
      {"max_position_embeddings", max_positions},
      {"rms_norm_eps", Decimal(m.rms_norm_eps())},
      {"tie_word_embeddings", m.tie_embeddings()},
      {"attention_dropout", 0.0},
      {"use_cache", true},
      {"dtype", std::string(dtype)},
      {"torch_dtype", std::string(dtype)},
  };
  if (m.head_dim() > 0) out["head_dim"] = m.head_dim();  // else hidden_size / heads
  WriteRope(m, out);
  WriteIds(ids, out);
  switch (config.architecture) {
    case HfArchitecture::kLlama:
      out["attention_bias"] = false;
      out["mlp_bias"] = false;
      break;
    case HfArchitecture::kQwen3Moe:
    case HfArchitecture::kQwen3:
      out["attention_bias"] = false;
      [[fallthrough]];
    case HfArchitecture::kQwen2:  // its query/key/value biases need no field
      out["use_sliding_window"] = false;
      out["sliding_window"] = nullptr;
      break;
    case HfArchitecture::kMistral:
    case HfArchitecture::kMixtral:
      out["sliding_window"] = max_positions;
      break;
  }
  if (IsMoeArchitecture(config.architecture)) WriteExperts(config.architecture, m, out);
  return out.dump(2) + "\n";
}

std::string HfGenerationConfigJson(const HfTokenIds& ids) {
  json out = json::object();
  WriteIds(ids, out);
  return out.dump(2) + "\n";
}

}  // namespace trellis::model
