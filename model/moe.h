#ifndef TRELLIS_MODEL_MOE_H_
#define TRELLIS_MODEL_MOE_H_

// The mixture-of-experts MLP of a block (job.proto ModelConfig.num_experts
// > 0; docs/models.md "Mixture of experts"): a linear router over E experts
// and E SwiGLU experts of width I = expert_d_ff (d_ff when 0), held as
// stacked tensors under transformers 5's names:
//
//   mlp.gate.weight            [E, d]      the router
//   mlp.experts.gate_up_proj   [E, 2I, d]  each expert's gate rows, then its up rows
//   mlp.experts.down_proj      [E, d, I]
//
// Every position goes to k = experts_per_token experts: the top k of the
// router's softmax over all E (float32), weighted by those probabilities,
// renormalized to sum to one with normalize_expert_weights. The experts
// run grouped: the (position, slot) assignments sorted by expert, one
// matrix product per expert over its contiguous rows.

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "model/lora.h"
#include "trellis/v1/job.pb.h"

namespace trellis::model {

// One MoE layer's routing in one forward pass over N = B * T positions.
struct LayerRouting {
  // In: [N, k] int64 experts to use instead of the router's top k
  // (routing replay); undefined: the router's own.
  torch::Tensor replay;
  // In: [N] bool, the positions the load-balancing loss counts; undefined:
  // every position.
  torch::Tensor valid;
  // Out: [N, k] int64, the router's own top k in descending probability.
  torch::Tensor chosen;
  // Out: [E] float32, the router's probabilities summed over the valid
  // positions (differentiable).
  torch::Tensor probability_sum;
  // Out: [E] float32, how many (valid position, slot) pairs the router's
  // own top k gives each expert.
  torch::Tensor selections;
  // Out: the number of valid positions (float32 scalar).
  torch::Tensor valid_count;
};

class SparseMoeImpl : public torch::nn::Module {
 public:
  // REQUIRES: config.num_experts() > 0, 0 < experts_per_token <= num_experts.
  // With kOverwritten nothing is drawn (model/lora.h InitialValues).
  SparseMoeImpl(const trellis::v1::ModelConfig& config, InitialValues init);

  // x: [B, T, d] -> [B, T, d]; fills routing's outputs from its inputs.
  torch::Tensor forward(const torch::Tensor& x, LayerRouting& routing);

 private:
  // The experts' weighted sum for x [N, d], experts [N, k], weights [N, k].
  torch::Tensor RunExperts(const torch::Tensor& x, const torch::Tensor& experts,
                           const torch::Tensor& weights) const;

  int64_t num_experts_, top_k_;
  bool normalize_;
  LoraLinear gate_{nullptr};  // "gate": the router, without an adapter
  torch::Tensor gate_up_proj_, down_proj_;
};
TORCH_MODULE(SparseMoe);

// TORCH_CHECKs that `replay` is [B, T, layers, k] of integers in
// [0, num_experts) with no expert twice at one position.
void CheckReplay(const torch::Tensor& replay, int64_t B, int64_t T, int64_t layers, int64_t k,
                 int64_t num_experts);

// Hugging Face's load_balancing_loss_func (Switch Transformer's loss, as
// transformers' Mixtral and Qwen3-MoE compute it) over `layers`:
// num_experts * sum_e f_e * P_e, where f_e is the share of (layer, valid
// position, slot) choices the routers' own top k give expert e and P_e
// the mean router probability of e over every layer's valid positions.
// Differentiable through P; 0 when no position is valid.
torch::Tensor LoadBalancingLoss(const std::vector<LayerRouting>& layers, int64_t num_experts);

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_MOE_H_
