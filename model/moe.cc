#include "model/moe.h"

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "model/lora.h"
#include "trellis/v1/job.pb.h"

namespace trellis::model {

SparseMoeImpl::SparseMoeImpl(const trellis::v1::ModelConfig& config, InitialValues init)
    : num_experts_(config.num_experts()),
      top_k_(config.experts_per_token()),
      normalize_(config.normalize_expert_weights()) {
  TORCH_CHECK(num_experts_ > 0 && top_k_ > 0 && top_k_ <= num_experts_,
              "SparseMoe: experts_per_token ", top_k_, " must be in [1, num_experts ",
              num_experts_, "]");
  const int64_t d = config.d_model();
  const int64_t width = config.expert_d_ff() > 0 ? config.expert_d_ff() : config.d_ff();
  gate_ = register_module("gate", LoraLinear(d, num_experts_, /*rank=*/0, /*alpha=*/0,
                                             /*bias=*/false, init));
  auto experts = register_module("experts", std::make_shared<torch::nn::Module>());
  // Drawn by the transformer (every matrix N(0, init_std)) or overwritten.
  gate_up_proj_ =
      experts->register_parameter("gate_up_proj", torch::empty({num_experts_, 2 * width, d}));
  down_proj_ = experts->register_parameter("down_proj", torch::empty({num_experts_, d, width}));
}

torch::Tensor SparseMoeImpl::forward(const torch::Tensor& x, LayerRouting& routing) {
  const torch::Tensor flat = x.reshape({-1, x.size(-1)});
  const int64_t N = flat.size(0);
  const torch::Tensor probs = torch::softmax(gate_(flat).to(torch::kFloat32), -1);  // [N, E]
  routing.chosen = std::get<1>(probs.topk(top_k_, -1));
  const torch::Tensor experts =
      routing.replay.defined() ? routing.replay.to(probs.device(), torch::kLong) : routing.chosen;
  torch::Tensor weights = probs.gather(1, experts);
  if (normalize_) weights = weights / weights.sum(-1, /*keepdim=*/true);

  const torch::Tensor valid =
      routing.valid.defined()
          ? routing.valid.to(probs.device(), torch::kFloat32).reshape({N, 1})
          : torch::ones({N, 1}, probs.options());
  routing.probability_sum = (probs * valid).sum(0);
  routing.selections = torch::zeros({num_experts_}, probs.options())
                           .scatter_add_(0, routing.chosen.flatten(),
                                         valid.expand({N, top_k_}).flatten());
  routing.valid_count = valid.sum();
  return RunExperts(flat, experts, weights.to(x.scalar_type())).view(x.sizes());
}

torch::Tensor SparseMoeImpl::RunExperts(const torch::Tensor& x, const torch::Tensor& experts,
                                        const torch::Tensor& weights) const {
  const torch::Tensor assigned = experts.flatten();  // [N * k], slot j of row n at n * k + j
  const torch::Tensor order = torch::argsort(assigned, /*stable=*/true);
  const torch::Tensor rows_of = torch::floor_divide(order, experts.size(1));
  const torch::Tensor counts = torch::bincount(assigned, {}, num_experts_).to(torch::kCPU);
  const torch::Tensor inputs = x.index_select(0, rows_of);  // grouped by expert
  const auto count = counts.accessor<int64_t, 1>();
  std::vector<torch::Tensor> outputs;
  int64_t start = 0;
  for (int64_t e = 0; e < num_experts_; ++e) {
    const int64_t n = count[e];
    if (n == 0) continue;
    const std::vector<torch::Tensor> gate_up =
        torch::linear(inputs.narrow(0, start, n), gate_up_proj_[e]).chunk(2, -1);
    outputs.push_back(torch::linear(torch::silu(gate_up[0]) * gate_up[1], down_proj_[e]));
    start += n;
  }
  const torch::Tensor weighted =
      torch::cat(outputs) * weights.flatten().index_select(0, order).unsqueeze(1);
  return torch::zeros_like(x).index_add(0, rows_of, weighted);
}

void CheckReplay(const torch::Tensor& replay, int64_t B, int64_t T, int64_t layers, int64_t k,
                 int64_t num_experts) {
  TORCH_CHECK(replay.dim() == 4 && replay.size(0) == B && replay.size(1) == T &&
                  replay.size(2) == layers && replay.size(3) == k,
              "Transformer: routing replay must be [B, T, MoE layers, experts_per_token] = [", B,
              ", ", T, ", ", layers, ", ", k, "], got ", replay.sizes());
  TORCH_CHECK(!replay.is_floating_point() && !replay.is_complex() &&
                  replay.scalar_type() != torch::kBool,
              "Transformer: routing replay must hold integer experts, got ",
              replay.scalar_type());
  if (replay.numel() == 0) return;
  const torch::Tensor experts = replay.to(torch::kLong);
  TORCH_CHECK(experts.min().item<int64_t>() >= 0 && experts.max().item<int64_t>() < num_experts,
              "Transformer: routing replay names experts outside [0, ", num_experts, ")");
  const torch::Tensor sorted = std::get<0>(experts.sort(-1));
  TORCH_CHECK(k < 2 || !(sorted.narrow(-1, 1, k - 1) == sorted.narrow(-1, 0, k - 1))
                            .any()
                            .item<bool>(),
              "Transformer: routing replay names an expert twice at one position");
}

torch::Tensor LoadBalancingLoss(const std::vector<LayerRouting>& layers, int64_t num_experts) {
  torch::Tensor selections = layers.at(0).selections;
  torch::Tensor probability = layers.at(0).probability_sum;
  torch::Tensor rows = layers.at(0).valid_count;
  for (size_t i = 1; i < layers.size(); ++i) {
    selections = selections + layers[i].selections;
    probability = probability + layers[i].probability_sum;
    rows = rows + layers[i].valid_count;
  }
  const torch::Tensor total = rows.clamp_min(1);
  return (selections / total * (probability / total)).sum() * static_cast<double>(num_experts);
}

}  // namespace trellis::model
