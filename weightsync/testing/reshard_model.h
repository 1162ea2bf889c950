#ifndef TRELLIS_WEIGHTSYNC_TESTING_RESHARD_MODEL_H_
#define TRELLIS_WEIGHTSYNC_TESTING_RESHARD_MODEL_H_

// A synthetic model-shaped layout for the resharding sync's tests and
// benchmark (weightsync/reshard.h): Llama-named blocks, so that tensor
// parallel slices apply, and an outer unit; the whole model's values as
// the tests' reference, which no rank holds.

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/shard_layout.h"
#include "weightsync/reshard_plan.h"

namespace trellis::weightsync::testing {

struct ModelShape {
  int blocks = 2;
  int64_t hidden = 12;
  int64_t kv = 6;  // The key and value projections' rows.
  int64_t intermediate = 24;
  int64_t vocab = 18;
};

// One unit per block ("model.layers.<b>") and the "outer" unit, each over
// `learner_ranks` ranks, in `dtype`.
inline std::vector<model::FlatUnit> ModelUnits(const ModelShape& m, int learner_ranks,
                                               const std::string& dtype = "F32") {
  using Tensors = std::vector<std::pair<std::string, std::vector<int64_t>>>;
  std::vector<model::FlatUnit> units;
  for (int b = 0; b < m.blocks; ++b) {
    const std::string p = absl::StrCat("model.layers.", b, ".");
    const Tensors tensors = {
        {p + "input_layernorm.weight", {m.hidden}},
        {p + "self_attn.q_proj.weight", {m.hidden, m.hidden}},
        {p + "self_attn.k_proj.weight", {m.kv, m.hidden}},
        {p + "self_attn.v_proj.weight", {m.kv, m.hidden}},
        {p + "self_attn.o_proj.weight", {m.hidden, m.hidden}},
        {p + "post_attention_layernorm.weight", {m.hidden}},
        {p + "mlp.gate_proj.weight", {m.intermediate, m.hidden}},
        {p + "mlp.up_proj.weight", {m.intermediate, m.hidden}},
        {p + "mlp.down_proj.weight", {m.hidden, m.intermediate}},
    };
    units.push_back(
        model::MakeFlatUnit(absl::StrCat("model.layers.", b), dtype, tensors, learner_ranks));
  }
  const Tensors outer = {{"model.embed_tokens.weight", {m.vocab, m.hidden}},
                         {"model.norm.weight", {m.hidden}},
                         {"lm_head.weight", {m.vocab, m.hidden}}};
  units.push_back(model::MakeFlatUnit("outer", dtype, outer, learner_ranks));
  return units;
}

// The whole model, as no rank holds it: the test's reference. Each unit's
// tensors back to back, padded to its ranks' shards, values distinct per
// version.
inline std::vector<at::Tensor> FullUnits(const weightsync::ReshardPlan& plan, int64_t version) {
  std::vector<at::Tensor> full;
  for (const model::FlatUnit& u : plan.units()) {
    at::Tensor t = at::zeros({u.ranks * u.shard_numel}, at::kFloat);
    t.narrow(0, 0, u.numel)
        .copy_(at::arange(u.numel, at::kFloat) * 0.25 + 1000.0 * static_cast<double>(version) +
               static_cast<double>(full.size()) * 1e5);
    full.push_back(t);
  }
  return full;
}

inline std::vector<at::Tensor> ShardsOf(const std::vector<at::Tensor>& full,
                                        const weightsync::ReshardPlan& plan, int rank) {
  std::vector<at::Tensor> shards;
  for (size_t u = 0; u < full.size(); ++u) {
    const int64_t n = plan.units()[u].shard_numel;
    shards.push_back(full[u].narrow(0, rank * n, n).clone());
  }
  return shards;
}

// What actor rank `k` must hold of tensor `e` of unit `u`.
inline at::Tensor ExpectedSlice(const std::vector<at::Tensor>& full,
                                const weightsync::ReshardPlan& plan, int u,
                                const model::FlatEntry& e, int k) {
  at::Tensor whole = full[u].narrow(0, e.offset, e.numel()).view(e.shape);
  const model::TensorSlice s = model::TensorParallelSlice(e.name, k, plan.actor_ranks());
  return s.whole() ? whole : whole.chunk(s.parts, s.dim)[s.index];
}

}  // namespace trellis::weightsync::testing

#endif  // TRELLIS_WEIGHTSYNC_TESTING_RESHARD_MODEL_H_
