#ifndef TRELLIS_MODEL_TRANSFORMER_H_
#define TRELLIS_MODEL_TRANSFORMER_H_

// Decoder-only transformer of the Llama / Qwen2 / Qwen3 / Mistral family:
// token embedding, pre-norm blocks (RMSNorm, rotary attention with
// grouped-query KV heads, SwiGLU MLP), final RMSNorm, LM head (or the tied
// embedding). ModelConfig turns on the variants: an explicit head_dim,
// query/key/value biases (attention_bias), per-head query/key norms
// (qk_norm), rescaled rotary frequencies (rope_scaling), and a mixture of
// experts in place of every block's MLP (num_experts > 0: Qwen3-MoE,
// Mixtral; model/moe.h). Parameter names
// follow the Hugging Face layout ("model.layers.0.self_attn.q_proj.weight",
// ...), so real checkpoints map onto it by name (model/hf_model.h). With
// LoRA (job.proto LoraConfig) the target projections also carry adapters
// ("...q_proj.lora_A.weight", "...q_proj.lora_B.weight"; model/lora.h) and
// every other weight, the base, is frozen (requires_grad false). The
// blocks are model/internal/block.h's.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "model/lora.h"
#include "trellis/v1/job.pb.h"

namespace trellis::model {

// Keys and values of every layer for a batch being decoded. For inference:
// forward() writes into these tensors in place, so run it under
// torch::NoGradGuard (autograd through a cache is not supported).
// REQUIRES: used with the model that created it.
struct KVCache {
  // Per layer: [batch, n_kv_heads, capacity, head_dim].
  std::vector<torch::Tensor> keys;
  std::vector<torch::Tensor> values;
  // Positions filled so far (the same for every row).
  int64_t length = 0;
  int64_t capacity = 0;

  int64_t bytes() const;
};

// Mixture-of-experts routing of one forward pass (model.num_experts > 0;
// ignored by dense models). L = the number of MoE layers, k = experts_per_token.
struct ExpertRouting {
  // In: [B, T, L, k] integer experts each position must use in each MoE layer
  // instead of the router's own top-k (routing replay); the router's
  // probabilities at those experts still weigh them (renormalized as the
  // family does) and still carry gradients. Undefined: the router chooses.
  // An expert outside [0, num_experts), one named twice at a position or
  // another shape is an error (c10::Error).
  torch::Tensor replay;
  // Out: [B, T, L, k] int64, the experts the router itself chose (its own
  // top-k, whatever `replay` says), in descending probability order, on
  // the model's device.
  torch::Tensor chosen;
  // Out: the load-balancing auxiliary loss of this pass (a differentiable
  // scalar; Hugging Face's load_balancing_loss_func over every MoE layer,
  // over the positions key_valid marks valid), unweighted. float32, on the
  // model's device.
  torch::Tensor aux_loss;
};

namespace internal {
struct Block;
struct RMSNorm;
}  // namespace internal

// Where a learner that keeps its parameters as shards between uses
// (memory.zero_stage 3, learner/internal/flat_shards.h) brings a block's
// parameters in and lets them go. A hook that fails throws (c10::Error),
// failing the forward or backward that called it.
class LayerHooks {
 public:
  virtual ~LayerHooks() = default;
  // Just before block `layer` reads its parameters in a forward, and right
  // after it no longer does.
  virtual void BeforeForward(int64_t layer) = 0;
  virtual void AfterForward(int64_t layer) = 0;
  // Called by autograd: before block `layer`'s backward (which reads its
  // parameters again), and once it has ended (its parameters' gradients
  // complete for this backward).
  virtual void BeforeBackward(int64_t layer) = 0;
  virtual void AfterBackward(int64_t layer) = 0;
};

// What sits on top of the final norm.
enum class Head {
  // "lm_head" (or the tied embedding): logits over the vocabulary.
  kLanguageModel,
  // "score": one scalar per position, as Hugging Face's sequence-
  // classification models name it (reward models, critics). No LM head.
  kScalar,
};

class TransformerImpl : public torch::nn::Module {
 public:
  // REQUIRES: config and lora validated; config.vocab_size() > 0 or
  // vocab_size (the tokenizer's, used when config.vocab_size() is 0) > 0.
  // With kDrawn the base weights are drawn from LibTorch's default
  // generator in registration order, the adapters after them, so the base
  // does not depend on `lora`. With kOverwritten (for a load that
  // overwrites every parameter) nothing is drawn and the values are
  // undefined.
  TransformerImpl(const trellis::v1::ModelConfig& config, int64_t vocab_size,
                  Head head = Head::kLanguageModel,
                  const trellis::v1::LoraConfig& lora = trellis::v1::LoraConfig(),
                  InitialValues init = InitialValues::kDrawn);

  // tokens: [B, T] int64. positions: [B, T] int64 rotary positions (rows may
  // be left-padded, so a row's first real token has position 0).
  // key_valid: [B, S] bool where S = (cache ? cache->length : 0) + T; false
  // marks padding that no query may attend to. Undefined means all valid.
  // With a cache, attends to the cached keys, appends this call's keys and
  // values, and advances cache->length by T.
  // Returns the head's output: logits [B, T, vocab] (kLanguageModel) or
  // scores [B, T, 1] (kScalar), float32. forward = ApplyHead(Hidden(...)).
  // `routing` (may be null): a mixture of experts' replay in, its choices
  // and auxiliary loss out (ExpertRouting); with a cache, over this call's
  // T positions.
  torch::Tensor forward(const torch::Tensor& tokens,
                        const torch::Tensor& positions,
                        const torch::Tensor& key_valid = {},
                        KVCache* cache = nullptr, ExpertRouting* routing = nullptr);

  // The final norm's output [B, T, d_model]; arguments as forward().
  torch::Tensor Hidden(const torch::Tensor& tokens, const torch::Tensor& positions,
                       const torch::Tensor& key_valid = {}, KVCache* cache = nullptr,
                       ExpertRouting* routing = nullptr);
  torch::Tensor ApplyHead(const torch::Tensor& hidden);

  // Convenience for unpadded input: positions 0..T-1, no cache.
  torch::Tensor forward(const torch::Tensor& tokens);
  torch::Tensor Hidden(const torch::Tensor& tokens);

  // An empty cache for `batch` rows and up to `capacity` positions.
  KVCache NewCache(int64_t batch, int64_t capacity) const;

  // Casts every parameter to `dtype` (kBFloat16 for memory.precision bf16;
  // the rotary frequencies stay float32). The head's output stays float32.
  void SetParameterDtype(torch::ScalarType dtype);

  // Activation checkpointing: when on, a forward with autograd enabled and
  // no cache keeps only each block's input, and backward recomputes the
  // block (its seconds add to recompute_seconds()); a mixture of experts
  // recomputes with the experts the forward used.
  void set_activation_checkpointing(bool on) { activation_checkpointing_ = on; }
  // The model-side strategies of job.memory: activation_checkpointing, and
  // bf16 parameters for precision "bf16" (as the learner trains them).
  void ApplyMemoryConfig(const trellis::v1::MemoryConfig& memory);
  // Every forward calls `hooks` around each block, and a forward with
  // autograd arranges for its backward to call them (LayerHooks); null (the
  // default) calls nothing. `hooks` must outlive the model's use of it.
  void set_layer_hooks(LayerHooks* hooks) { layer_hooks_ = hooks; }
  // Seconds spent recomputing blocks since construction.
  double recompute_seconds() const { return recompute_seconds_; }

  const trellis::v1::ModelConfig& config() const { return config_; }
  int64_t vocab_size() const { return vocab_size_; }
  Head head() const { return head_; }
  // The number of mixture-of-experts layers (ExpertRouting's L): every
  // layer with config.num_experts > 0, else 0.
  int64_t moe_layers() const;

  // Every parameter under its name, in a stable order: the Llama weights
  // and, with LoRA, the adapters (what a checkpoint holds).
  std::vector<std::pair<std::string, torch::Tensor>> NamedWeights() const;
  // NamedWeights split: the adapters (empty without LoRA), and the rest.
  std::vector<std::pair<std::string, torch::Tensor>> AdapterWeights() const;
  std::vector<std::pair<std::string, torch::Tensor>> BaseWeights() const;
  // Plain Llama weights computing the same function: each adapted W
  // replaced by W + (alpha / rank) B A (new tensors). BaseWeights() without
  // LoRA. With `prefix`, only the weights whose names start with it (one
  // block's, "model.layers.3.", read alone).
  std::vector<std::pair<std::string, torch::Tensor>> MergedWeights(
      std::string_view prefix = {}) const;
  bool has_adapters() const;

  // Copies NamedWeights() in by name. Fails (changing nothing) when a name
  // is missing, unknown, or its shape differs; the message names the tensor.
  [[nodiscard]] absl::Status LoadWeights(
      const std::vector<std::pair<std::string, torch::Tensor>>& weights);
  // The same for BaseWeights() alone (plain Llama weights, e.g. a
  // model.init_checkpoint under LoRA); the adapters keep their values. And
  // for AdapterWeights() alone (a sharded learner's checkpoint keeps the
  // base in its shards); the base keeps its values.
  [[nodiscard]] absl::Status LoadBaseWeights(
      const std::vector<std::pair<std::string, torch::Tensor>>& weights);
  [[nodiscard]] absl::Status LoadAdapterWeights(
      const std::vector<std::pair<std::string, torch::Tensor>>& weights);

 private:
  trellis::v1::ModelConfig config_;
  int64_t vocab_size_;
  int64_t head_dim_;
  std::shared_ptr<torch::nn::Module> model_;    // "model"
  torch::nn::Embedding embed_tokens_{nullptr};  // "model.embed_tokens"
  // Registered so that named_parameters() yields exactly the Hugging Face
  // names of NamedWeights().
  std::vector<std::shared_ptr<internal::Block>> layers_;  // "model.layers.{i}"
  std::shared_ptr<internal::RMSNorm> norm_;               // "model.norm"
  Head head_;
  LoraLinear lm_head_{nullptr};                 // "lm_head"; null when tied
  LoraLinear score_{nullptr};                   // "score"; kScalar only
  torch::Tensor inv_freq_;                      // [head_dim / 2] rotary
  bool activation_checkpointing_ = false;
  double recompute_seconds_ = 0;
  LayerHooks* layer_hooks_ = nullptr;
};
TORCH_MODULE(Transformer);

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_TRANSFORMER_H_
