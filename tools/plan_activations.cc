#include "tools/plan_activations.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/lora.h"

namespace trellis::tools {
namespace {

// About 40 per-token tensors of the batch and the loss (ids, masks,
// log-prob rows, ratios), and one more element each.
constexpr int64_t kLossTensorsPerToken = 40;

struct Targets {
  bool attention_input = false;  // an adapter on q, k or v
  bool mlp_input = false;        // on gate or up
  bool down = false;
  int64_t count = 0;
};

Targets TargetsOf(const v1::LoraConfig& lora) {
  Targets t;
  if (lora.rank() <= 0) return t;
  for (v1::LoraConfig::Projection p : model::LoraTargets(lora)) {
    t.count += 1;
    t.attention_input |= p == v1::LoraConfig::Q_PROJ || p == v1::LoraConfig::K_PROJ ||
                         p == v1::LoraConfig::V_PROJ;
    t.mlp_input |= p == v1::LoraConfig::GATE_PROJ || p == v1::LoraConfig::UP_PROJ;
    t.down |= p == v1::LoraConfig::DOWN_PROJ;
  }
  return t;
}

// Elements one layer keeps per token (transformer.cc under autograd;
// LibTorch's saved tensors, counted with saved-tensor hooks):
//   every weight training: each RMSNorm's r (1) and x·r (d, for its
//   weight's gradient) and its output (d, the projections' input); q, k, v
//   as the attention reads them (qd + 2·kvd, qd = H·hd), its output (qd,
//   also the o projection's input: a view) and log-sum-exp (H); the
//   residual sum (d); the MLP's gate, silu, up and product (4·d_ff); the
//   layer output (d). The rotary embedding keeps only its tables, the fused
//   attention no score matrix.
//   LoRA (the base frozen): nothing for a base weight's gradient: no x·r,
//   a norm's output only where an adapter reads it, the MLP's product only
//   for a down adapter; each adapter's x·A (rank).
//   A mixture of experts (model/moe.cc) keeps instead of the MLP's 3·d_ff:
//   the router's logits and probabilities (2E), and per chosen expert
//   (k of them) the gathered input (d), the gate and up halves, the silu
//   and the product (4·ef) and the weighted output (d).
int64_t MlpElements(const config::ModelShape& s) {
  return s.E > 0 ? 2 * s.E + s.k * (2 * s.d + 4 * s.ef) : 3 * s.f;
}

int64_t LayerElements(const config::ModelShape& s, const v1::LoraConfig& lora) {
  const int64_t common = 2 * s.d + 2 + 2 * s.qd + 2 * s.kvd + s.H + MlpElements(s);
  if (lora.rank() <= 0) return common + 4 * s.d + (s.E > 0 ? 0 : s.f);
  const Targets t = TargetsOf(lora);
  return common + (t.attention_input ? s.d : 0) + (t.mlp_input ? s.d : 0) + (t.down ? s.f : 0) +
         lora.rank() * t.count;
}

std::string LayerFormula(const config::ModelShape& s, const v1::LoraConfig& lora) {
  const std::string mlp = s.E > 0 ? "2E + k(2d + 4ef)" : "3d_ff";
  if (lora.rank() <= 0) {
    return absl::StrCat("6d + 2qd + 2kvd + H + ", s.E > 0 ? mlp : "4d_ff", " + 2");
  }
  const Targets t = TargetsOf(lora);
  std::vector<std::string> terms = {absl::StrCat("2d + 2qd + 2kvd + H + ", mlp, " + 2")};
  if (t.attention_input) terms.push_back("d (q/k/v adapters' input)");
  if (t.mlp_input) terms.push_back("d (gate/up adapters' input)");
  if (t.down) terms.push_back("d_ff (down adapter's input)");
  terms.push_back(absl::StrCat(t.count, " x rank (x·A)"));
  return absl::StrJoin(terms, " + ");
}

}  // namespace

Strategy StrategyOf(const v1::JobConfig& job) {
  Strategy st;
  st.masters = job.memory().precision() == v1::MemoryConfig::BF16;
  st.weight_bytes = st.masters ? 2 : kFloat;
  st.checkpointing = job.memory().activation_checkpointing();
  st.lora = job.memory().lora();
  return st;
}

// With checkpointing, each block keeps only its input (d) and backward
// recomputes one block at a time, so one layer's full set is alive on top.
// With bf16 the blocks' tensors are half as large. Once per token: the
// embedding output (d), the rotary tables (2·hd) and, float32, the final
// norm (2d + 1), the log-softmax (V) and the loss tensors.
int64_t ActivationBytesPerToken(const config::ModelShape& s, const Strategy& st) {
  const int64_t layer = LayerElements(s, st.lora);
  const int64_t blocks = st.checkpointing ? s.L * s.d + layer : s.L * layer;
  return st.weight_bytes * (blocks + s.d + 2 * s.hd) +
         kFloat * (2 * s.d + 1 + s.V + kLossTensorsPerToken);
}

std::string ActivationFormula(const config::ModelShape& s, const Strategy& st) {
  const std::string layer = LayerFormula(s, st.lora);
  return absl::StrCat("rows x seq x (", st.masters ? "2 B" : "4 B", " x (",
                      st.checkpointing ? absl::StrCat("L·d + one layer's (", layer, ")")
                                       : absl::StrCat("L(", layer, ")"),
                      " + d + 2hd) + 4 B x (2d + V + 41))",
                      st.checkpointing ? ", per-layer checkpointing" : "",
                      st.masters ? ", bf16 blocks" : "",
                      st.lora.rank() > 0 ? ", LoRA: the base frozen" : "");
}

}  // namespace trellis::tools
