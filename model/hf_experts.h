#ifndef TRELLIS_MODEL_HF_EXPERTS_H_
#define TRELLIS_MODEL_HF_EXPERTS_H_

// A Hugging Face checkpoint's tensors mapped onto the Transformer's
// parameters, and the Transformer's experts written back in the released
// layout. The Transformer holds a mixture of experts' experts stacked
// (model/moe.h: "mlp.experts.gate_up_proj" [E, 2I, d], "mlp.experts.down_proj"
// [E, d, I], as transformers 5 holds them); released checkpoints hold one
// matrix per expert:
//
//   Qwen3-MoE  model.layers.N.mlp.experts.J.{gate,up,down}_proj.weight
//              model.layers.N.mlp.gate.weight
//   Mixtral    model.layers.N.block_sparse_moe.experts.J.{w1,w3,w2}.weight
//              (w1 the gate, w3 the up, w2 the down projection)
//              model.layers.N.block_sparse_moe.gate.weight
//
// Loading reads either layout (a checkpoint of stacked tensors maps by
// name) and stacks per-expert ones into their expert's rows.

#include <cstdint>
#include <map>
#include <string>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/hf_config.h"
#include "model/safetensors.h"

namespace trellis::model {

// Where a checkpoint's tensors go: each parameter whole, or a stacked
// expert tensor one expert's matrix at a time. Errors name the tensor.
class HfWeightMap {
 public:
  // `parameters`: the Transformer's, by name.
  explicit HfWeightMap(std::map<std::string, torch::Tensor> parameters);

  // The parameter, or the view of one, that the checkpoint tensor `name`
  // of `shape` is copied into. InvalidArgument when no parameter takes
  // the name ("unknown tensor"), its place was already given ("given
  // twice") or the shapes differ ("expected shape [..], got [..]").
  [[nodiscard]] absl::StatusOr<torch::Tensor> Target(const std::string& name,
                                                     c10::IntArrayRef shape);

  // InvalidArgument naming the first parameter (or expert matrix) no
  // Target call has covered ("tensor '...' is missing").
  [[nodiscard]] absl::Status CheckComplete() const;

 private:
  std::map<std::string, torch::Tensor> parameters_;
  std::map<std::string, std::string> filled_;  // place -> the tensor that filled it
};

// `weights` (the Transformer's names, as MergedWeights gives them) with
// every stacked expert tensor split into the released per-expert layout of
// `architecture` (the rest unchanged, in order). Tensors are views.
NamedTensors ReleasedExpertLayout(const NamedTensors& weights, HfArchitecture architecture);

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_HF_EXPERTS_H_
