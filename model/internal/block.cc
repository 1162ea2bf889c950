#include "model/internal/block.h"

#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <utility>

#include <torch/torch.h>

#include "config/choice.h"
#include "model/internal/tensor_parallel_reduce.h"
#include "model/lora.h"
#include "model/moe.h"
#include "model/rope.h"

namespace trellis::model::internal {

RMSNorm::RMSNorm(int64_t dim, double eps) : eps(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNorm::forward(const torch::Tensor& x) const {
  const torch::Tensor xf = x.to(torch::kFloat32);
  return (xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps)).to(x.scalar_type()) *
         weight;
}

Block::Block(const trellis::v1::ModelConfig& c, const trellis::v1::LoraConfig& lora,
             int64_t head_dim, int64_t index, InitialValues init)
    : n_heads(c.n_heads()), n_kv_heads(c.n_kv_heads()), head_dim(head_dim), index(index) {
  const int64_t d = c.d_model();
  // Projection `p` of `parent`, with an adapter when LoRA targets it; its
  // module is named as LoraConfig names it ("q_proj", ...).
  auto projection = [&lora, init](torch::nn::Module& parent, v1::LoraConfig::Projection p,
                                  int64_t in, int64_t out, bool bias = false) {
    const int64_t rank = IsLoraTarget(lora, p) ? lora.rank() : 0;
    return parent.register_module(config::ChoiceName(p),
                                  LoraLinear(in, out, rank, lora.alpha(), bias, init));
  };
  input_layernorm =
      register_module("input_layernorm", std::make_shared<RMSNorm>(d, c.rms_norm_eps()));
  auto attn = register_module("self_attn", std::make_shared<torch::nn::Module>());
  q_proj = projection(*attn, v1::LoraConfig::Q_PROJ, d, n_heads * head_dim, c.attention_bias());
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
  if (c.num_experts() > 0) {
    moe = register_module("mlp", SparseMoe(c, init));
    return;
  }
  auto mlp = register_module("mlp", std::make_shared<torch::nn::Module>());
  gate_proj = projection(*mlp, v1::LoraConfig::GATE_PROJ, d, c.d_ff());
  up_proj = projection(*mlp, v1::LoraConfig::UP_PROJ, d, c.d_ff());
  down_proj = projection(*mlp, v1::LoraConfig::DOWN_PROJ, c.d_ff(), d);
}

void Block::ResetAdapters() {
  for (LoraLinear* p : {&q_proj, &k_proj, &v_proj, &o_proj, &gate_proj, &up_proj, &down_proj}) {
    if (*p) (*p)->ResetAdapter();
  }
}

torch::Tensor Block::forward(const torch::Tensor& x, const AttentionContext& ctx,
                             LayerRouting* routing) {
  // A tensor-parallel rank's o_proj and down_proj give partial sums
  // (model/tensor_parallel.h): the group adds them up.
  torch::Tensor h = x + ReduceAcrossRanks(Attend(input_layernorm->forward(x), ctx));
  const torch::Tensor n = post_attention_layernorm->forward(h);
  if (moe) return h + moe->forward(n, *routing);
  return h + ReduceAcrossRanks(down_proj(torch::silu(gate_proj(n)) * up_proj(n)));
}

// The G = n_heads / n_kv_heads query heads that share a KV head are
// stacked along the query axis, so one batched matmul per KV head covers
// them.
torch::Tensor Block::Attend(const torch::Tensor& x, const AttentionContext& ctx) {
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

namespace {

// What a checkpointed block needs to run again in backward.
struct RecomputeState : torch::CustomClassHolder {
  std::shared_ptr<Block> block;
  AttentionContext ctx;
  // A mixture of experts' routing: the caller's inputs, then the first
  // pass's outputs but probability_sum (an output of the function).
  std::optional<LayerRouting> routing;
  double* seconds;
};

// The block and, for a mixture of experts, the router's probability sums:
// the outputs of the checkpointed function.
torch::autograd::variable_list RunBlock(RecomputeState& state, const torch::Tensor& x,
                                        LayerRouting* routing) {
  torch::Tensor out = state.block->forward(x, state.ctx, routing);
  if (routing == nullptr) return {out};
  return {out, std::move(routing->probability_sum)};
}

struct BlockRecompute : torch::autograd::Function<BlockRecompute> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const torch::Tensor& x,
                                                const c10::IValue& state) {
    ctx->save_for_backward({x});
    ctx->saved_data["state"] = state;
    torch::NoGradGuard no_grad;
    auto s = c10::static_intrusive_pointer_cast<RecomputeState>(state.toCapsule());
    return RunBlock(*s, x, s->routing ? &*s->routing : nullptr);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto state =
        c10::static_intrusive_pointer_cast<RecomputeState>(ctx->saved_data["state"].toCapsule());
    const torch::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    std::optional<LayerRouting> again;
    if (state->routing) {
      again.emplace();
      again->replay =
          state->routing->replay.defined() ? state->routing->replay : state->routing->chosen;
      again->valid = state->routing->valid;
    }
    torch::autograd::variable_list outs;
    {
      torch::AutoGradMode grad(true);
      const auto start = std::chrono::steady_clock::now();
      outs = RunBlock(*state, x, again ? &*again : nullptr);
      *state->seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    torch::autograd::variable_list roots, grads;
    for (size_t i = 0; i < outs.size(); ++i) {
      if (!grad_out[i].defined()) continue;
      roots.push_back(outs[i]);
      grads.push_back(grad_out[i]);
    }
    torch::autograd::backward(roots, grads);
    return {x.grad(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor CheckpointedBlock(const std::shared_ptr<Block>& block, const torch::Tensor& x,
                                const AttentionContext& ctx, LayerRouting* routing,
                                double* seconds) {
  auto state = c10::make_intrusive<RecomputeState>();
  state->block = block;
  state->ctx = ctx;
  if (routing != nullptr) state->routing = *routing;
  state->seconds = seconds;
  const torch::autograd::variable_list outs =
      BlockRecompute::apply(x, c10::IValue::make_capsule(state));
  if (routing != nullptr) {
    *routing = *state->routing;
    routing->probability_sum = outs[1];
  }
  return outs[0];
}

namespace {

struct HookPoint : torch::autograd::Function<HookPoint> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               int64_t hooks, int64_t layer, bool before_backward) {
    ctx->saved_data["hooks"] = hooks;
    ctx->saved_data["layer"] = layer;
    ctx->saved_data["before"] = before_backward;
    return x.view_as(x);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto* hooks = reinterpret_cast<LayerHooks*>(ctx->saved_data["hooks"].toInt());
    const int64_t layer = ctx->saved_data["layer"].toInt();
    if (ctx->saved_data["before"].toBool()) {
      hooks->BeforeBackward(layer);
    } else {
      hooks->AfterBackward(layer);
    }
    return {grad_out[0], torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor LayerHookPoint(const torch::Tensor& x, LayerHooks* hooks, int64_t layer,
                             bool before_backward) {
  if (!torch::GradMode::is_enabled() || !x.requires_grad()) return x;
  return HookPoint::apply(x, reinterpret_cast<int64_t>(hooks), layer, before_backward);
}

}  // namespace trellis::model::internal
