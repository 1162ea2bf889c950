#include "config/internal/model_checks.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "config/recipe.h"

namespace trellis::config::internal {
namespace {

// A mixture of experts (num_experts 0: dense, the other fields unused).
void CheckExperts(const std::string& p, const v1::ModelConfig& m, Checker& c) {
  c.NonNegative(p + "num_experts", m.num_experts());
  c.NonNegative(p + "expert_d_ff", m.expert_d_ff());
  c.NonNegative(p + "router_aux_loss_coef", m.router_aux_loss_coef());
  if (m.num_experts() <= 0) return;
  c.Require(m.experts_per_token() >= 1 && m.experts_per_token() <= m.num_experts(),
            p + "experts_per_token",
            absl::StrCat("in [1, num_experts (", m.num_experts(), ")]"), m.experts_per_token());
}

}  // namespace

void CheckModel(const std::string& p, const v1::ModelConfig& m, Checker& c) {
  c.NonNegative(p + "vocab_size", m.vocab_size());
  c.Positive(p + "d_model", m.d_model());
  c.Positive(p + "n_layers", m.n_layers());
  c.Positive(p + "n_heads", m.n_heads());
  c.Positive(p + "n_kv_heads", m.n_kv_heads());
  c.Positive(p + "d_ff", m.d_ff());
  c.AtLeast(p + "max_seq_len", m.max_seq_len(), 2);
  c.Positive(p + "rope_theta", m.rope_theta());
  c.PositiveAtMost(p + "rms_norm_eps", m.rms_norm_eps(), 1.0f);
  c.Within(p + "init_std", m.init_std(), 0.0f, 1.0f);
  c.NonNegative(p + "head_dim", m.head_dim());
  c.NonNegative(p + "max_position_embeddings", m.max_position_embeddings());
  if (m.max_position_embeddings() > 0) {
    c.Require(m.max_seq_len() <= m.max_position_embeddings(), p + "max_seq_len",
              absl::StrCat("<= ", p, "max_position_embeddings (", m.max_position_embeddings(), ")"),
              m.max_seq_len());
  }
  if (m.rope_scaling().type() == v1::ModelConfig::RopeScaling::LLAMA3) {
    const v1::ModelConfig::RopeScaling& r = m.rope_scaling();
    c.Positive(p + "rope_scaling.factor", r.factor());
    c.Positive(p + "rope_scaling.low_freq_factor", r.low_freq_factor());
    c.Finite(p + "rope_scaling.high_freq_factor", r.high_freq_factor());
    c.Require(r.high_freq_factor() > r.low_freq_factor(), p + "rope_scaling.high_freq_factor",
              absl::StrCat("> low_freq_factor (", r.low_freq_factor(), ")"), r.high_freq_factor());
    c.Positive(p + "rope_scaling.original_max_position_embeddings",
               r.original_max_position_embeddings());
  }
  if (m.head_dim() > 0) {
    c.Require(m.head_dim() % 2 == 0, p + "head_dim", "even for rotary embeddings", m.head_dim());
  }
  CheckExperts(p, m, c);
  if (m.n_heads() <= 0 || m.d_model() <= 0 || m.head_dim() != 0) return;
  c.Require(
      m.d_model() % m.n_heads() == 0, p + "d_model",
      absl::StrCat("divisible by ", p, "n_heads (", m.n_heads(), ") unless ", p, "head_dim is set"),
      m.d_model());
  if (m.d_model() % m.n_heads() == 0) {
    const int head_dim = m.d_model() / m.n_heads();
    c.Require(head_dim % 2 == 0, p + "d_model",
              absl::StrCat("such that d_model / n_heads (the head size, ", head_dim,
                           ") is even for rotary embeddings"),
              m.d_model());
  }
  if (m.n_kv_heads() > 0) {
    c.Require(m.n_heads() % m.n_kv_heads() == 0, p + "n_kv_heads",
              absl::StrCat("a divisor of ", p, "n_heads (", m.n_heads(), ")"), m.n_kv_heads());
  }
}


void CheckRoutingReplay(const v1::JobConfig& job, Checker& c) {
  if (!job.grpo().routing_replay()) return;
  const v1::ModelConfig& m = job.model();
  c.Require(m.num_experts() > 0, "grpo.routing_replay",
            "false for a dense model (model.num_experts 0: no experts to replay)", "true");
  c.Require(m.num_experts() <= 256, "model.num_experts",
            "<= 256 with grpo.routing_replay (a record holds an expert in one byte)",
            m.num_experts());
  const std::optional<Recipe> recipe = RecipeOf(job);
  c.Require(recipe == Recipe::kGrpo, "grpo.routing_replay",
            "false unless algorithm is grpo (the objective that replays the records)",
            absl::StrCat("true with algorithm \"", job.algorithm(), "\""));
  c.Require(job.environment().name().empty(), "grpo.routing_replay",
            "false with an environment (multi-turn episodes do not record routing yet)",
            absl::StrCat("true with environment \"", job.environment().name(), "\""));
}

}  // namespace trellis::config::internal
