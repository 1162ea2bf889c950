#ifndef TRELLIS_MODEL_INTERNAL_BLOCK_H_
#define TRELLIS_MODEL_INTERNAL_BLOCK_H_

// The transformer's decoder block (model/transformer.h): pre-norm
// attention and MLP, each residual, and activation checkpointing of one
// block. The MLP is SwiGLU, or with config.num_experts > 0 the mixture of
// experts of model/moe.h.

#include <cstdint>
#include <memory>

#include <torch/torch.h>

#include "model/lora.h"
#include "model/moe.h"
#include "model/transformer.h"
#include "trellis/v1/job.pb.h"

namespace trellis::model::internal {

// Root-mean-square norm with a learned scale and no bias.
struct RMSNorm : torch::nn::Module {
  RMSNorm(int64_t dim, double eps);
  // Normalizes in float32 whatever the input's precision (bf16 sums of
  // squares lose too much).
  torch::Tensor forward(const torch::Tensor& x) const;
  double eps;
  torch::Tensor weight;
};

// Per-forward inputs shared by every layer.
struct AttentionContext {
  torch::Tensor cos, sin;  // [B, 1, T, head_dim]
  torch::Tensor bias;      // [B or 1, 1, 1, T, S]: 0 where allowed, -inf not
  KVCache* cache;          // nullptr without a cache
  int64_t past;            // cache length before this call
  bool causal;             // bias is plain causal attention (no cache, no padding)
};

// One pre-norm decoder block. With config.attention_bias the query, key
// and value projections have biases; with config.qk_norm, queries and keys
// are RMS-normalized per head ("self_attn.q_norm", "self_attn.k_norm")
// before the rotary embedding.
struct Block : torch::nn::Module {
  Block(const trellis::v1::ModelConfig& c, const trellis::v1::LoraConfig& lora,
        int64_t head_dim, int64_t index, InitialValues init);

  void ResetAdapters();

  // x [B, T, d] -> [B, T, d]. REQUIRES: `routing` non-null exactly when
  // the block is a mixture of experts (is_moe()).
  torch::Tensor forward(const torch::Tensor& x, const AttentionContext& ctx,
                        LayerRouting* routing);

  bool is_moe() const { return static_cast<bool>(moe); }

  // Grouped-query attention without copying KV heads.
  torch::Tensor Attend(const torch::Tensor& x, const AttentionContext& ctx);

  int64_t n_heads, n_kv_heads, head_dim, index;
  std::shared_ptr<RMSNorm> input_layernorm, post_attention_layernorm;
  std::shared_ptr<RMSNorm> q_norm, k_norm;  // null without config.qk_norm
  LoraLinear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  // The dense MLP (null in a mixture of experts).
  LoraLinear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  SparseMoe moe{nullptr};  // "mlp" with config.num_experts > 0
};

// The block with activation checkpointing: the forward runs without
// autograd and keeps only x; backward runs the block again with autograd
// (adding its seconds to *seconds) and back-propagates through that graph.
// A mixture of experts recomputes with the experts the first pass used
// (routing->replay, else the router's choice), so the recompute routes
// exactly as the forward did; routing's outputs are the first pass's, its
// probability_sum differentiable through the recompute.
torch::Tensor CheckpointedBlock(const std::shared_ptr<Block>& block, const torch::Tensor& x,
                                const AttentionContext& ctx, LayerRouting* routing,
                                double* seconds);

// `x` unchanged; with autograd, a backward through the result calls
// `hooks`->BeforeBackward(layer) (before_backward) or AfterBackward(layer)
// as the gradient passes. Without autograd (or when x needs no gradient)
// it only returns x.
torch::Tensor LayerHookPoint(const torch::Tensor& x, LayerHooks* hooks, int64_t layer,
                             bool before_backward);

}  // namespace trellis::model::internal

#endif  // TRELLIS_MODEL_INTERNAL_BLOCK_H_
