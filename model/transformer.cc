#include "model/transformer.h"

#include <torch/torch.h>

#include <limits>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "model/internal/block.h"
#include "model/lora.h"
#include "model/moe.h"
#include "model/rope.h"
#include "model/token_ids.h"

namespace trellis::model {
namespace {

using internal::AttentionContext;
using internal::Block;
using internal::RMSNorm;

// Drawn as torch::nn::Linear's with kDrawn (a LoraLinear without an adapter).
LoraLinear NoBiasLinear(int64_t in, int64_t out, InitialValues init) {
  return LoraLinear(in, out, /*rank=*/0, /*alpha=*/0, /*bias=*/false, init);
}

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
                                       const torch::Tensor& key_valid, KVCache* cache,
                                       ExpertRouting* routing) {
  return ApplyHead(Hidden(tokens, positions, key_valid, cache, routing));
}

int64_t TransformerImpl::moe_layers() const {
  return config_.num_experts() > 0 ? static_cast<int64_t>(layers_.size()) : 0;
}

torch::Tensor TransformerImpl::ApplyHead(const torch::Tensor& hidden) {
  if (score_) return score_(hidden).to(torch::kFloat32);
  if (lm_head_) return lm_head_(hidden).to(torch::kFloat32);
  return torch::linear(hidden, embed_tokens_->weight).to(torch::kFloat32);
}

torch::Tensor TransformerImpl::Hidden(const torch::Tensor& tokens_in,
                                      const torch::Tensor& positions,
                                      const torch::Tensor& key_valid, KVCache* cache,
                                      ExpertRouting* routing) {
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

  // Each MoE layer's routing over the B * T positions of this call.
  std::vector<LayerRouting> moe(moe_layers());
  const bool replay = routing != nullptr && routing->replay.defined() && !moe.empty();
  if (replay) {
    CheckReplay(routing->replay, B, T, moe_layers(), config_.experts_per_token(),
                config_.num_experts());
  }
  const torch::Tensor valid =
      key_valid.defined() && !moe.empty()
          ? key_valid.narrow(1, past, T).reshape({B * T}).to(device, torch::kBool)
          : torch::Tensor();
  for (int64_t i = 0; i < moe_layers(); ++i) {
    moe[i].valid = valid;
    if (replay) {
      moe[i].replay = routing->replay.select(2, i).reshape({B * T, -1}).to(device, torch::kLong);
    }
  }

  torch::Tensor h = embed_tokens_(tokens);
  const bool recompute =
      activation_checkpointing_ && cache == nullptr && torch::GradMode::is_enabled();
  // Backward reaches a checkpointed block only through its input, so that
  // input must require grad even when everything before it is frozen.
  if (recompute && !h.requires_grad()) h = h.detach().requires_grad_(true);
  LayerHooks* const hooks = layer_hooks_;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const auto layer = static_cast<int64_t>(i);
    LayerRouting* layer_routing = layers_[i]->is_moe() ? &moe[i] : nullptr;
    if (hooks != nullptr) {
      h = internal::LayerHookPoint(h, hooks, layer, /*before_backward=*/false);
      hooks->BeforeForward(layer);
    }
    h = recompute ? internal::CheckpointedBlock(layers_[i], h, ctx, layer_routing,
                                                &recompute_seconds_)
                  : layers_[i]->forward(h, ctx, layer_routing);
    if (hooks != nullptr) {
      hooks->AfterForward(layer);
      h = internal::LayerHookPoint(h, hooks, layer, /*before_backward=*/true);
    }
  }
  if (routing != nullptr) {
    routing->chosen = torch::Tensor();
    routing->aux_loss = torch::Tensor();
    if (!moe.empty()) {
      std::vector<torch::Tensor> chosen;
      for (const LayerRouting& layer : moe) chosen.push_back(layer.chosen.view({B, T, -1}));
      routing->chosen = torch::stack(chosen, 2);
      routing->aux_loss = LoadBalancingLoss(moe, config_.num_experts());
    }
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
