#include "model/transformer.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "config/choice.h"
#include "model/lora.h"
#include "model/rope.h"
#include "model/token_ids.h"

namespace trellis::model {
namespace {

namespace F = torch::nn::functional;

// Drawn as torch::nn::Linear's with kDrawn (a LoraLinear without an adapter).
LoraLinear NoBiasLinear(int64_t in, int64_t out, InitialValues init) {
  return LoraLinear(in, out, /*rank=*/0, /*alpha=*/0, /*bias=*/false, init);
}

}  // namespace

// Root-mean-square norm with a learned scale and no bias.
struct TransformerImpl::RMSNorm : torch::nn::Module {
  RMSNorm(int64_t dim, double eps) : eps(eps) {
    weight = register_parameter("weight", torch::ones({dim}));
  }
  // Normalizes in float32 whatever the input's precision (bf16 sums of
  // squares lose too much).
  torch::Tensor forward(const torch::Tensor& x) const {
    const torch::Tensor xf = x.to(torch::kFloat32);
    return (xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps)).to(x.scalar_type()) *
           weight;
  }
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

// One pre-norm decoder block: attention and SwiGLU MLP, each residual. With
// config.attention_bias the query, key and value projections have biases;
// with config.qk_norm, queries and keys are RMS-normalized per head
// ("self_attn.q_norm", "self_attn.k_norm") before the rotary embedding.
struct TransformerImpl::Block : torch::nn::Module {
  Block(const trellis::v1::ModelConfig& c, const trellis::v1::LoraConfig& lora,
        int64_t head_dim, int64_t index, InitialValues init)
      : n_heads(c.n_heads()), n_kv_heads(c.n_kv_heads()), head_dim(head_dim),
        index(index) {
    const int64_t d = c.d_model();
    // Projection `p` of `parent`, with an adapter when LoRA targets it; its
    // module is named as LoraConfig names it ("q_proj", ...).
    auto projection = [&lora, init](torch::nn::Module& parent, v1::LoraConfig::Projection p,
                              int64_t in, int64_t out, bool bias = false) {
      const int64_t rank = IsLoraTarget(lora, p) ? lora.rank() : 0;
      return parent.register_module(config::ChoiceName(p),
                                    LoraLinear(in, out, rank, lora.alpha(), bias, init));
    };
    input_layernorm = register_module(
        "input_layernorm", std::make_shared<RMSNorm>(d, c.rms_norm_eps()));
    auto attn = register_module("self_attn", std::make_shared<torch::nn::Module>());
    q_proj =
        projection(*attn, v1::LoraConfig::Q_PROJ, d, n_heads * head_dim, c.attention_bias());
    k_proj =
        projection(*attn, v1::LoraConfig::K_PROJ, d, n_kv_heads * head_dim, c.attention_bias());
    v_proj =
        projection(*attn, v1::LoraConfig::V_PROJ, d, n_kv_heads * head_dim, c.attention_bias());
    o_proj = projection(*attn, v1::LoraConfig::O_PROJ, n_heads * head_dim, d);
    if (c.qk_norm()) {
      const double eps = c.rms_norm_eps();
      q_norm = attn->register_module("q_norm", std::make_shared<RMSNorm>(head_dim, eps));
      k_norm = attn->register_module("k_norm", std::make_shared<RMSNorm>(head_dim, eps));
    }
    post_attention_layernorm = register_module(
        "post_attention_layernorm", std::make_shared<RMSNorm>(d, c.rms_norm_eps()));
    auto mlp = register_module("mlp", std::make_shared<torch::nn::Module>());
    gate_proj = projection(*mlp, v1::LoraConfig::GATE_PROJ, d, c.d_ff());
    up_proj = projection(*mlp, v1::LoraConfig::UP_PROJ, d, c.d_ff());
    down_proj = projection(*mlp, v1::LoraConfig::DOWN_PROJ, c.d_ff(), d);
  }

  void ResetAdapters() {
    for (LoraLinear* p : {&q_proj, &k_proj, &v_proj, &o_proj, &gate_proj, &up_proj, &down_proj}) {
      (*p)->ResetAdapter();
    }
  }

  torch::Tensor forward(const torch::Tensor& x, const AttentionContext& ctx) {
    torch::Tensor h = x + Attend(input_layernorm->forward(x), ctx);
    const torch::Tensor n = post_attention_layernorm->forward(h);
    return h + down_proj(F::silu(gate_proj(n)) * up_proj(n));
  }

  // Grouped-query attention without copying KV heads: the G = n_heads /
  // n_kv_heads query heads that share a KV head are stacked along the query
  // axis, so one batched matmul per KV head covers them.
  torch::Tensor Attend(const torch::Tensor& x, const AttentionContext& ctx) {
    const int64_t B = x.size(0), T = x.size(1);
    const int64_t G = n_heads / n_kv_heads;
    torch::Tensor q = q_proj(x).view({B, T, n_heads, head_dim});
    torch::Tensor k = k_proj(x).view({B, T, n_kv_heads, head_dim});
    torch::Tensor v = v_proj(x).view({B, T, n_kv_heads, head_dim}).transpose(1, 2);
    if (q_norm) {
      q = q_norm->forward(q);
      k = k_norm->forward(k);
    }
    q = ApplyRotary(q.transpose(1, 2), ctx.cos, ctx.sin);
    k = ApplyRotary(k.transpose(1, 2), ctx.cos, ctx.sin);
    if (ctx.cache != nullptr) {
      torch::Tensor& keys = ctx.cache->keys[index];
      torch::Tensor& values = ctx.cache->values[index];
      keys.narrow(2, ctx.past, T).copy_(k);
      values.narrow(2, ctx.past, T).copy_(v);
      k = keys.narrow(2, 0, ctx.past + T);
      v = values.narrow(2, 0, ctx.past + T);
    }
    const int64_t S = k.size(2);
    const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
    torch::Tensor out;  // [B, H, T, hd]
    if (T > 1) {
      // Training and prefill: LibTorch's scaled-dot-product attention (flash
      // and memory-efficient kernels on CUDA, a fused kernel on the CPU),
      // grouped-query heads as they are; the causal flag for a plain causal
      // pass, else the additive bias [B, 1, T, S].
      out = at::scaled_dot_product_attention(
          q, k, v, ctx.causal ? std::nullopt : std::optional<torch::Tensor>(ctx.bias.squeeze(2)),
          /*dropout_p=*/0.0, /*is_causal=*/ctx.causal, scale, /*enable_gqa=*/true);
    } else {
      // Decode (T == 1) multiplies by vectors: broadcasting beats LibTorch's
      // CPU bmm there, which runs one small GEMM per batch entry.
      torch::Tensor scores = (q.reshape({B, n_kv_heads, G, 1, head_dim}) * k.unsqueeze(2)).sum(-1);
      scores = torch::add(ctx.bias, scores.view({B, n_kv_heads, G, 1, S}), scale);
      const torch::Tensor probs = torch::softmax(scores, -1);
      out = (probs.view({B, n_kv_heads, G, S, 1}) * v.unsqueeze(2))
                .sum(-2)
                .view({B, n_heads, 1, head_dim});
    }
    return o_proj(out.transpose(1, 2).reshape({B, T, n_heads * head_dim}));
  }

  int64_t n_heads, n_kv_heads, head_dim, index;
  std::shared_ptr<RMSNorm> input_layernorm, post_attention_layernorm;
  std::shared_ptr<RMSNorm> q_norm, k_norm;  // null without config.qk_norm
  LoraLinear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  LoraLinear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};

namespace {

// What a checkpointed block needs to run again in backward.
struct RecomputeState : torch::CustomClassHolder {
  std::shared_ptr<torch::nn::Module> block;
  AttentionContext ctx;
  std::function<torch::Tensor(const torch::Tensor&)> run;
  double* seconds;
};

// Activation checkpointing of one block: the forward runs without autograd
// and keeps only the block's input; backward runs the block again with
// autograd and back-propagates through that recomputed graph, which
// accumulates the block's parameter gradients and yields the input's.
struct BlockRecompute : torch::autograd::Function<BlockRecompute> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const c10::IValue& state) {
    ctx->save_for_backward({x});
    ctx->saved_data["state"] = state;
    torch::NoGradGuard no_grad;
    return c10::static_intrusive_pointer_cast<RecomputeState>(state.toCapsule())->run(x);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto state =
        c10::static_intrusive_pointer_cast<RecomputeState>(ctx->saved_data["state"].toCapsule());
    const torch::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    torch::Tensor out;
    {
      torch::AutoGradMode grad(true);
      const auto start = std::chrono::steady_clock::now();
      out = state->run(x);
      *state->seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    torch::autograd::backward({out}, {grad_out[0]});
    return {x.grad(), torch::Tensor()};
  }
};

}  // namespace

void TransformerImpl::ApplyMemoryConfig(const trellis::v1::MemoryConfig& memory) {
  set_activation_checkpointing(memory.activation_checkpointing());
  if (memory.precision() == v1::MemoryConfig::BF16) SetParameterDtype(torch::kBFloat16);
}

TransformerImpl::TransformerImpl(const trellis::v1::ModelConfig& config,
                                 int64_t vocab_size, Head head,
                                 const trellis::v1::LoraConfig& lora, InitialValues init)
    : config_(config), vocab_size_(VocabSize(config, vocab_size)), head_(head) {
  TORCH_CHECK(vocab_size_ > 0, "Transformer: vocab_size must be > 0, got ", vocab_size_);
  TORCH_CHECK(config.n_heads() > 0 &&
                  (config.head_dim() > 0 || config.d_model() % config.n_heads() == 0),
              "Transformer: d_model ", config.d_model(), " is not a multiple of n_heads ",
              config.n_heads());
  TORCH_CHECK(config.n_kv_heads() > 0 && config.n_heads() % config.n_kv_heads() == 0,
              "Transformer: n_kv_heads ", config.n_kv_heads(), " does not divide n_heads ",
              config.n_heads());
  head_dim_ = config.head_dim() > 0 ? config.head_dim() : config.d_model() / config.n_heads();
  TORCH_CHECK(head_dim_ % 2 == 0, "Transformer: head_dim ", head_dim_, " must be even");

  model_ = register_module("model", std::make_shared<torch::nn::Module>());
  torch::nn::EmbeddingOptions embedding(vocab_size_, config.d_model());
  if (init == InitialValues::kOverwritten) {
    embedding._weight(torch::empty({vocab_size_, config.d_model()}));
  }
  embed_tokens_ = model_->register_module("embed_tokens", torch::nn::Embedding(embedding));
  auto layers = model_->register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.n_layers(); ++i) {
    layers_.push_back(std::make_shared<Block>(config, lora, head_dim_, i, init));
    layers->push_back(layers_.back());
  }
  norm_ = model_->register_module(
      "norm", std::make_shared<RMSNorm>(config.d_model(), config.rms_norm_eps()));
  if (head == Head::kScalar) {
    score_ = register_module("score", NoBiasLinear(config.d_model(), 1, init));
  } else if (!config.tie_embeddings()) {
    lm_head_ = register_module("lm_head", NoBiasLinear(config.d_model(), vocab_size_, init));
  }
  inv_freq_ = register_buffer("inv_freq", RotaryInverseFrequencies(config, head_dim_));

  // Deterministic under torch::manual_seed: the base's parameters in
  // registration order, then the adapters'.
  torch::NoGradGuard no_grad;
  if (init == InitialValues::kDrawn) {
    for (auto& p : named_parameters()) {
      if (IsAdapterName(p.key())) continue;
      if (absl::EndsWith(p.key(), ".bias")) {
        p.value().zero_();
      } else if (p.value().dim() == 1) {
        p.value().fill_(1.0);  // RMSNorm scales
      } else {
        p.value().normal_(0.0, config.init_std());
      }
    }
  }
  for (auto& layer : layers_) layer->ResetAdapters();
  if (has_adapters()) {
    for (auto& [name, p] : BaseWeights()) p.set_requires_grad(false);
  }
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& tokens, const torch::Tensor& positions,
                                       const torch::Tensor& key_valid, KVCache* cache) {
  return ApplyHead(Hidden(tokens, positions, key_valid, cache));
}

torch::Tensor TransformerImpl::ApplyHead(const torch::Tensor& hidden) {
  if (score_) return score_(hidden).to(torch::kFloat32);
  if (lm_head_) return lm_head_(hidden).to(torch::kFloat32);
  return torch::linear(hidden, embed_tokens_->weight).to(torch::kFloat32);
}

torch::Tensor TransformerImpl::Hidden(const torch::Tensor& tokens_in,
                                      const torch::Tensor& positions,
                                      const torch::Tensor& key_valid, KVCache* cache) {
  TORCH_CHECK(tokens_in.dim() == 2, "Transformer: tokens must be [B, T], got ",
              tokens_in.sizes());
  const int64_t B = tokens_in.size(0), T = tokens_in.size(1);
  TORCH_CHECK(positions.sizes() == tokens_in.sizes(), "Transformer: positions ",
              positions.sizes(), " must match tokens ", tokens_in.sizes());
  const int64_t past = cache != nullptr ? cache->length : 0;
  const int64_t S = past + T;
  if (cache != nullptr) {
    TORCH_CHECK(cache->keys.size() == layers_.size() && cache->values.size() == layers_.size(),
                "Transformer: cache has ", cache->keys.size(), " layers, model has ",
                layers_.size());
    TORCH_CHECK(S <= cache->capacity, "Transformer: cache capacity ", cache->capacity,
                " exceeded: ", past, " cached + ", T, " new positions");
    TORCH_CHECK(cache->keys.empty() || cache->keys[0].size(0) == B, "Transformer: cache batch ",
                cache->keys[0].size(0), " != tokens batch ", B);
  }
  // Inputs may come from the host: everything computes where the weights are.
  const torch::Device device = embed_tokens_->weight.device();
  const torch::Tensor tokens = tokens_in.to(device, torch::kLong);

  // Mask in cache coordinates: query t sits at slot past + t and may see
  // slots <= past + t that are valid. Every query also sees its own slot, so
  // a padding query (whose slot is invalid) still has one finite score and
  // yields garbage-but-finite output instead of NaN.
  const torch::Tensor key_slot = torch::arange(S, torch::dtype(torch::kLong).device(device));
  const torch::Tensor query_slot =
      torch::arange(past, S, torch::dtype(torch::kLong).device(device)).unsqueeze(1);
  torch::Tensor allowed = key_slot.unsqueeze(0) <= query_slot;  // [T, S]
  if (key_valid.defined()) {
    TORCH_CHECK(key_valid.dim() == 2 && key_valid.size(0) == B && key_valid.size(1) == S,
                "Transformer: key_valid must be [", B, ", ", S, "], got ",
                key_valid.sizes());
    allowed = (allowed.unsqueeze(0) & key_valid.to(device, torch::kBool).unsqueeze(1)) |
              (key_slot.unsqueeze(0) == query_slot);  // [B, T, S]
  } else {
    allowed = allowed.unsqueeze(0);
  }
  // Bias and rotary tables in the weights' precision; the angles in float32.
  const torch::ScalarType dtype = embed_tokens_->weight.scalar_type();
  AttentionContext ctx;
  ctx.bias = torch::zeros(allowed.sizes(), torch::dtype(dtype).device(device))
                 .masked_fill_(allowed.logical_not(), -std::numeric_limits<float>::infinity())
                 .view({allowed.size(0), 1, 1, T, S});
  const torch::Tensor freqs =
      positions.to(device, torch::kFloat32).unsqueeze(-1) * inv_freq_;  // [B, T, hd/2]
  const torch::Tensor angles = torch::cat({freqs, freqs}, -1).unsqueeze(1);
  ctx.cos = angles.cos().to(dtype);
  ctx.sin = angles.sin().to(dtype);
  ctx.cache = cache;
  ctx.past = past;
  ctx.causal = past == 0 && !key_valid.defined();

  torch::Tensor h = embed_tokens_(tokens);
  const bool recompute =
      activation_checkpointing_ && cache == nullptr && torch::GradMode::is_enabled();
  // Backward reaches a checkpointed block only through its input, so that
  // input must require grad even when everything before it is frozen.
  if (recompute && !h.requires_grad()) h = h.detach().requires_grad_(true);
  for (auto& layer : layers_) {
    if (!recompute) {
      h = layer->forward(h, ctx);
      continue;
    }
    auto state = c10::make_intrusive<RecomputeState>();
    state->ctx = ctx;
    state->run = [block = layer.get(), &c = state->ctx](const torch::Tensor& x) {
      return block->forward(x, c);
    };
    state->block = layer;
    state->seconds = &recompute_seconds_;
    h = BlockRecompute::apply(h, c10::IValue::make_capsule(std::move(state)));
  }
  h = norm_->forward(h);
  if (cache != nullptr) cache->length = S;
  return h;
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& tokens) {
  return ApplyHead(Hidden(tokens));
}

torch::Tensor TransformerImpl::Hidden(const torch::Tensor& tokens) {
  TORCH_CHECK(tokens.dim() == 2, "Transformer: tokens must be [B, T], got ", tokens.sizes());
  const torch::Tensor positions =
      torch::arange(tokens.size(1), torch::dtype(torch::kLong).device(tokens.device()))
          .unsqueeze(0)
          .expand({tokens.size(0), tokens.size(1)});
  return Hidden(tokens, positions);
}

KVCache TransformerImpl::NewCache(int64_t batch, int64_t capacity) const {
  KVCache cache;
  cache.capacity = capacity;
  const auto options = embed_tokens_->weight.options().requires_grad(false);
  for (size_t i = 0; i < layers_.size(); ++i) {
    cache.keys.push_back(
        torch::zeros({batch, config_.n_kv_heads(), capacity, head_dim_}, options));
    cache.values.push_back(
        torch::zeros({batch, config_.n_kv_heads(), capacity, head_dim_}, options));
  }
  return cache;
}

}  // namespace trellis::model
