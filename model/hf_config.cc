#include "model/hf_config.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "env/env.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/message_differencer.h"
#include "trellis/v1/job.pb.h"

namespace trellis::model {
namespace {

using json = nlohmann::json;
using RopeScaling = trellis::v1::ModelConfig::RopeScaling;

struct ArchitectureName {
  HfArchitecture architecture;
  absl::string_view name;
  absl::string_view model_type;
};
constexpr ArchitectureName kArchitectures[] = {
    {HfArchitecture::kLlama, "LlamaForCausalLM", "llama"},
    {HfArchitecture::kQwen2, "Qwen2ForCausalLM", "qwen2"},
    {HfArchitecture::kQwen3, "Qwen3ForCausalLM", "qwen3"},
    {HfArchitecture::kMistral, "MistralForCausalLM", "mistral"},
    {HfArchitecture::kQwen3Moe, "Qwen3MoeForCausalLM", "qwen3_moe"},
    {HfArchitecture::kMixtral, "MixtralForCausalLM", "mixtral"},
};

struct DtypeName {
  absl::string_view name;
  c10::ScalarType type;
};
constexpr DtypeName kDtypes[] = {
    {"float32", c10::ScalarType::Float},
    {"bfloat16", c10::ScalarType::BFloat16},
    {"float16", c10::ScalarType::Half},
};

// The names of a table's entries, comma-separated.
template <typename Entry, size_t n>
std::string Names(const Entry (&table)[n]) {
  return absl::StrJoin(table, ", ", [](std::string* out, const Entry& e) {
    out->append(e.name.data(), e.name.size());
  });
}

// Typed reads of one JSON object's fields. The first error is kept (and
// later reads return their fallback), so a parse reads on and checks once.
class Reader {
 public:
  Reader(const json& object, std::string where) : object_(object), where_(std::move(where)) {}

  // The field, or null when it is absent or JSON null.
  const json* Find(absl::string_view key) const {
    auto it = object_.find(std::string(key));
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }

  // A positive integer within int32 (ModelConfig's fields); required
  // unless `fallback` is given.
  int32_t Positive(absl::string_view key, std::optional<int32_t> fallback = std::nullopt) {
    const json* v = Find(key);
    if (v == nullptr) return Missing(key, fallback);
    if (!v->is_number_integer() || v->get<int64_t>() <= 0 ||
        v->get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return Wrong(key, "a positive integer", *v, fallback.value_or(1));
    }
    return static_cast<int32_t>(v->get<int64_t>());
  }

  double Number(absl::string_view key, std::optional<double> fallback = std::nullopt) {
    const json* v = Find(key);
    if (v == nullptr) return Missing(key, fallback);
    if (!v->is_number()) return Wrong(key, "a number", *v, fallback.value_or(1));
    return v->get<double>();
  }

  bool Bool(absl::string_view key, bool fallback) {
    const json* v = Find(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) return Wrong(key, "true or false", *v, fallback);
    return v->get<bool>();
  }

  std::string String(absl::string_view key, std::string fallback) {
    const json* v = Find(key);
    if (v == nullptr) return fallback;
    if (!v->is_string()) return Wrong(key, "a string", *v, fallback);
    return v->get<std::string>();
  }

  // Refuses `what` ("hidden_act 'gelu'"), naming what is supported.
  void Unsupported(absl::string_view what, absl::string_view supported) {
    Fail(absl::StrCat(what, " is not supported; supported: ", supported));
  }

  void Fail(absl::string_view message) {
    Keep(absl::InvalidArgumentError(absl::StrCat(where_, ": ", message)));
  }
  // Keeps `status` unless an error is already kept (a nested object's).
  void Keep(const absl::Status& status) {
    if (status_.ok()) status_ = status;
  }

  const std::string& where() const { return where_; }
  const absl::Status& status() const { return status_; }

 private:
  template <typename T>
  T Missing(absl::string_view key, std::optional<T> fallback) {
    if (!fallback.has_value()) Fail(absl::StrCat("required field ", key, " is missing"));
    return fallback.value_or(T{1});
  }

  template <typename T>
  T Wrong(absl::string_view key, absl::string_view expected, const json& found, T fallback) {
    Fail(absl::StrCat(key, ": expected ", expected, ", found ", found.dump()));
    return fallback;
  }

  const json& object_;
  std::string where_;
  absl::Status status_;
};

void ReadArchitecture(Reader& r, HfConfig& out) {
  const json* list = r.Find("architectures");
  if (list == nullptr || !list->is_array() || list->size() != 1 || !(*list)[0].is_string()) {
    r.Fail(absl::StrCat("architectures: expected a list of one name, found ",
                        list == nullptr ? "none" : list->dump(), "; supported: ",
                        Names(kArchitectures)));
    return;
  }
  const std::string name = (*list)[0].get<std::string>();
  for (const ArchitectureName& a : kArchitectures) {
    if (a.name == name) {
      out.architecture = a.architecture;
      return;
    }
  }
  r.Unsupported(absl::StrCat("architecture '", name, "'"), Names(kArchitectures));
}

// rope_theta and rope_scaling: version 5's rope_parameters object, or
// version 4's top-level rope_theta and rope_scaling (null when plain).
void ReadRope(Reader& r, trellis::v1::ModelConfig& m) {
  const json* parameters = r.Find("rope_parameters");
  const json* scaling = parameters != nullptr ? parameters : r.Find("rope_scaling");
  const char* name = parameters != nullptr ? "rope_parameters" : "rope_scaling";
  if (scaling != nullptr && !scaling->is_object()) {
    r.Fail(absl::StrCat(name, ": expected an object, found ", scaling->dump()));
    return;
  }
  const json empty = json::object();
  Reader s(scaling != nullptr ? *scaling : empty, absl::StrCat(r.where(), ": ", name));
  m.set_rope_theta(static_cast<float>(
      parameters != nullptr ? s.Number("rope_theta", 10000.0) : r.Number("rope_theta", 10000.0)));
  if (r.Number("partial_rotary_factor", 1.0) != 1.0 ||
      s.Number("partial_rotary_factor", 1.0) != 1.0) {
    r.Unsupported("partial_rotary_factor other than 1", "1 (rotary over the whole head)");
  }
  const std::string type = s.String("rope_type", s.String("type", "default"));
  if (type == "llama3") {
    RopeScaling* llama3 = m.mutable_rope_scaling();
    llama3->set_type(RopeScaling::LLAMA3);
    llama3->set_factor(static_cast<float>(s.Number("factor")));
    llama3->set_low_freq_factor(static_cast<float>(s.Number("low_freq_factor")));
    llama3->set_high_freq_factor(static_cast<float>(s.Number("high_freq_factor")));
    llama3->set_original_max_position_embeddings(s.Positive("original_max_position_embeddings"));
    if (llama3->high_freq_factor() <= llama3->low_freq_factor() || llama3->factor() <= 0) {
      s.Fail("llama3 needs factor > 0 and high_freq_factor > low_freq_factor");
    }
  } else if (type != "default") {
    s.Unsupported(absl::StrCat("rope type '", type, "'"), "default, llama3");
  }
  r.Keep(s.status());
}

// Attention variants: the family's biases and norms, and sliding windows.
void ReadAttention(Reader& r, HfArchitecture architecture, HfConfig& out) {
  trellis::v1::ModelConfig& m = out.model;
  if (architecture == HfArchitecture::kQwen2) {
    m.set_attention_bias(true);  // Qwen2 always has query/key/value biases
  } else if (r.Bool("attention_bias", false)) {
    r.Unsupported("attention_bias true (biases on all four attention projections)",
                  "false, and Qwen2ForCausalLM's query/key/value biases");
  }
  m.set_qk_norm(architecture == HfArchitecture::kQwen3 ||
                architecture == HfArchitecture::kQwen3Moe);
  if (architecture == HfArchitecture::kMistral || architecture == HfArchitecture::kMixtral) {
    if (r.Find("sliding_window") != nullptr) {
      const int32_t window = r.Positive("sliding_window");
      const int32_t limit = m.max_position_embeddings();
      if (limit == 0 || window <= limit) out.sliding_window = window;
      m.set_max_position_embeddings(limit > 0 ? std::min(limit, window) : window);
    }
  } else if (r.Bool("use_sliding_window", false)) {
    r.Unsupported("use_sliding_window true", "false (full attention in every layer)");
  }
  if (const json* types = r.Find("layer_types"); types != nullptr) {
    for (const json& t : *types) {
      if (t != "full_attention") {
        r.Unsupported(absl::StrCat("layer_types entry ", t.dump()), "\"full_attention\"");
      }
    }
  }
}

// The experts of a mixture of experts, with transformers' defaults for
// absent fields, and what Trellis cannot compute the same refused.
void ReadExperts(Reader& r, HfArchitecture architecture, trellis::v1::ModelConfig& m) {
  const bool mixtral = architecture == HfArchitecture::kMixtral;
  // Each family's own name first; transformers 5 writes num_local_experts for both.
  const char* experts = r.Find("num_experts") != nullptr ? "num_experts" : "num_local_experts";
  m.set_num_experts(r.Positive(mixtral ? "num_local_experts" : experts, mixtral ? 8 : 128));
  m.set_experts_per_token(r.Positive("num_experts_per_tok", 2));
  // Mixtral always renormalizes; its experts are intermediate_size wide.
  m.set_normalize_expert_weights(mixtral || r.Bool("norm_topk_prob", false));
  if (!mixtral) m.set_expert_d_ff(r.Positive("moe_intermediate_size", 768));
  m.set_router_aux_loss_coef(static_cast<float>(r.Number("router_aux_loss_coef", 0.001)));
  if (const json* dense = r.Find("mlp_only_layers");
      !mixtral && dense != nullptr && !(dense->is_array() && dense->empty())) {
    r.Unsupported(absl::StrCat("mlp_only_layers ", dense->dump()), "[] (experts in every layer)");
  }
  if (const int32_t step = r.Positive("decoder_sparse_step", 1); !mixtral && step != 1) {
    r.Unsupported(absl::StrCat("decoder_sparse_step ", step), "1 (experts in every layer)");
  }
  if (r.Number("router_jitter_noise", 0) != 0) r.Unsupported("router_jitter_noise", "0");
  if (const json* v = r.Find("shared_expert_intermediate_size"); v != nullptr && *v != 0) {
    r.Unsupported(absl::StrCat("shared_expert_intermediate_size ", v->dump()), "no shared experts");
  }
  if (m.experts_per_token() > m.num_experts() || m.router_aux_loss_coef() < 0) {
    r.Fail(absl::StrCat("need num_experts_per_tok <= the experts (", m.num_experts(),
                        ") and router_aux_loss_coef >= 0, found ", m.experts_per_token(), ", ",
                        m.router_aux_loss_coef()));
  }
}

void ReadDtype(Reader& r, HfConfig& out) {
  const std::string name = r.String("dtype", r.String("torch_dtype", "float32"));
  for (const DtypeName& d : kDtypes) {
    if (d.name == name) {
      out.dtype = d.type;
      return;
    }
  }
  r.Unsupported(absl::StrCat("dtype '", name, "'"), Names(kDtypes));
}

const ArchitectureName& Architecture(HfArchitecture architecture) {
  for (const ArchitectureName& a : kArchitectures) {
    if (a.architecture == architecture) return a;
  }
  return kArchitectures[0];  // unreachable: the table lists every value
}

}  // namespace

bool IsMoeArchitecture(HfArchitecture architecture) {
  return architecture == HfArchitecture::kQwen3Moe || architecture == HfArchitecture::kMixtral;
}

absl::string_view HfArchitectureName(HfArchitecture architecture) {
  return Architecture(architecture).name;
}

absl::string_view HfModelType(HfArchitecture architecture) {
  return Architecture(architecture).model_type;
}

absl::string_view HfDtypeName(c10::ScalarType dtype) {
  for (const DtypeName& d : kDtypes) {
    if (d.type == dtype) return d.name;
  }
  return "";
}

absl::StatusOr<HfConfig> ParseHfConfig(absl::string_view json_text,
                                       absl::string_view source) {
  const json j =
      json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  }
  Reader r(j, std::string(source));
  HfConfig out;
  ReadArchitecture(r, out);
  trellis::v1::ModelConfig& m = out.model;
  m.set_vocab_size(r.Positive("vocab_size"));
  m.set_d_model(r.Positive("hidden_size"));
  m.set_d_ff(r.Positive("intermediate_size"));
  m.set_n_layers(r.Positive("num_hidden_layers"));
  m.set_n_heads(r.Positive("num_attention_heads"));
  m.set_n_kv_heads(r.Positive("num_key_value_heads", m.n_heads()));
  if (r.Find("head_dim") != nullptr) m.set_head_dim(r.Positive("head_dim"));
  m.set_rms_norm_eps(static_cast<float>(r.Number("rms_norm_eps", 1e-6)));
  m.set_tie_embeddings(r.Bool("tie_word_embeddings", false));
  if (r.Find("max_position_embeddings") != nullptr) {
    m.set_max_position_embeddings(r.Positive("max_position_embeddings"));
  }
  ReadRope(r, m);
  ReadAttention(r, out.architecture, out);
  if (IsMoeArchitecture(out.architecture)) ReadExperts(r, out.architecture, m);
  ReadDtype(r, out);
  if (const std::string act = r.String("hidden_act", "silu"); act != "silu") {
    r.Unsupported(absl::StrCat("hidden_act '", act, "'"), "silu");
  }
  if (r.Bool("mlp_bias", false)) r.Unsupported("mlp_bias true", "false");
  if (r.Find("quantization_config") != nullptr) {
    r.Unsupported("quantization_config", "unquantized float32, bfloat16 or float16 weights");
  }
  if (m.n_heads() % m.n_kv_heads() != 0) {
    r.Fail(absl::StrCat("num_key_value_heads ", m.n_kv_heads(),
                        " does not divide num_attention_heads ", m.n_heads()));
  }
  const int32_t head_dim = m.head_dim() > 0 ? m.head_dim() : m.d_model() / m.n_heads();
  if ((m.head_dim() == 0 && m.d_model() % m.n_heads() != 0) || head_dim % 2 != 0) {
    r.Fail(absl::StrCat("the head size (head_dim, or hidden_size / num_attention_heads) must be "
                        "a whole even number, got hidden_size ",
                        m.d_model(), ", num_attention_heads ", m.n_heads(), ", head_dim ",
                        m.head_dim()));
  }
  if (!r.status().ok()) return r.status();
  return out;
}

absl::StatusOr<HfConfig> ReadHfConfig(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/config.json");
  absl::StatusOr<std::string> text = env::Env::Default()->ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseHfConfig(*text, path);
}

absl::Status ResolveHfModel(trellis::v1::ModelConfig* config) {
  using trellis::v1::ModelConfig;
  if (config->path().empty()) return absl::OkStatus();
  absl::StatusOr<HfConfig> hf = ReadHfConfig(config->path());
  if (!hf.ok()) {
    return absl::Status(hf.status().code(), absl::StrCat("model.path: ", hf.status().message()));
  }
  ModelConfig resolved = hf->model;
  const google::protobuf::Descriptor* d = config->GetDescriptor();
  const google::protobuf::Reflection* r = config->GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    if (!r->HasField(*config, f)) continue;
    switch (f->number()) {
      case ModelConfig::kPathFieldNumber:
      case ModelConfig::kMaxSeqLenFieldNumber:
      case ModelConfig::kInitCheckpointFieldNumber:
      case ModelConfig::kInitStdFieldNumber:
        r->SwapFields(config, &resolved, {f});
        continue;
    }
    // Field f alone; a field set to its default equals one left unset.
    auto alone = [&](const ModelConfig& m) {
      ModelConfig out = m;
      for (int j = 0; j < d->field_count(); ++j) {
        if (j != i) r->ClearField(&out, d->field(j));
      }
      return out;
    };
    const ModelConfig job_value = alone(*config);
    const ModelConfig hf_value = alone(resolved);
    if (!google::protobuf::util::MessageDifferencer::Equivalent(job_value, hf_value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.", f->name(), ": the job has {", job_value.ShortDebugString(), "} but ",
          config->path(), "/config.json gives {", hf_value.ShortDebugString(),
          "}; leave it out of the job"));
    }
  }
  if (resolved.max_position_embeddings() > 0 &&
      resolved.max_seq_len() > resolved.max_position_embeddings()) {
    const bool window = hf->sliding_window == resolved.max_position_embeddings();
    return absl::InvalidArgumentError(absl::StrCat(
        "model.max_seq_len ", resolved.max_seq_len(), " exceeds ", resolved.path(),
        "/config.json's ", window ? "sliding_window " : "max_position_embeddings ",
        resolved.max_position_embeddings(),
        window ? " (attention beyond the window is not supported)" : ""));
  }
  *config = std::move(resolved);
  return absl::OkStatus();
}

}  // namespace trellis::model
