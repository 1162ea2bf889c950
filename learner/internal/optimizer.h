#ifndef TRELLIS_LEARNER_INTERNAL_OPTIMIZER_H_
#define TRELLIS_LEARNER_INTERNAL_OPTIMIZER_H_

// The learner's optimizers by OptimizerConfig.name: "adamw" and "sgd"
// (job.proto). Both put parameters of two or more dimensions in a group with
// weight_decay and the rest (norms) in a group without.
//
// Checkpoint state as named tensors, under `prefix`, for parameter j of
// param group g:
//   adamw  adamw_state.h
//   sgd    <prefix>g<g>.p<j>.momentum_buffer   like the parameter (momentum > 0
//          and stepped at least once)

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "model/safetensors.h"
#include "trellis/v1/job.pb.h"

namespace trellis::learner::internal {

// REQUIRES: config validated (name is adamw or sgd). Parameters that do not
// require grad are left out.
std::unique_ptr<torch::optim::Optimizer> NewOptimizer(const std::vector<torch::Tensor>& params,
                                                      const v1::OptimizerConfig& config);
// The same with the groups given: `decay` with weight_decay, `no_decay`
// without (flat shards, whose dimensions say nothing: flat_shards.h).
std::unique_ptr<torch::optim::Optimizer> NewOptimizer(std::vector<torch::Tensor> decay,
                                                      std::vector<torch::Tensor> no_decay,
                                                      const v1::OptimizerConfig& config);

// The optimizer's state tensors (AdamW: exp_avg, exp_avg_sq and
// max_exp_avg_sq where defined; SGD: momentum buffers), and their bytes.
std::vector<torch::Tensor> OptimizerStateTensors(torch::optim::Optimizer& optimizer);
int64_t OptimizerStateBytes(torch::optim::Optimizer& optimizer);

void SetLearningRate(torch::optim::Optimizer& optimizer, double lr);

// Appends copies of the state of `optimizer`, made by NewOptimizer(...,
// config), to `out`.
void AppendOptimizerState(torch::optim::Optimizer& optimizer, const v1::OptimizerConfig& config,
                          const std::string& prefix, model::NamedTensors* out);

// Replaces the state of `optimizer` (made by NewOptimizer(..., config)) with
// the entries under `prefix`; fails with FailedPrecondition, changing
// nothing, naming the tensor and `where`, when they do not fit.
[[nodiscard]] absl::Status LoadOptimizerState(const std::map<std::string, torch::Tensor>& tensors,
                                              const v1::OptimizerConfig& config,
                                              const std::string& prefix, const std::string& where,
                                              torch::optim::Optimizer& optimizer);

}  // namespace trellis::learner::internal

#endif  // TRELLIS_LEARNER_INTERNAL_OPTIMIZER_H_
