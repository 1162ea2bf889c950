#ifndef TRELLIS_LEARNER_INTERNAL_TRAINABLE_H_
#define TRELLIS_LEARNER_INTERNAL_TRAINABLE_H_

// The tensors an optimizer updates, and their tie to the model's weights
// (job.proto MemoryConfig). With precision fp32 the optimizer steps the
// model's own tensors. With bf16 the model computes in bf16 and the
// optimizer steps fp32 master copies: after backward the model's gradients
// are copied up into the masters' (where clipping happens, in fp32), after
// the step the masters are rounded down into the model.

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "learner/internal/data_parallel.h"
#include "learner/internal/flat_shards.h"

namespace trellis::learner::internal {

// One fp32 master per model tensor, shared by every optimizer phase that
// trains it (an SFT warm-up and the RL phase step the same masters).
class MasterCopies {
 public:
  // The master of `model_param`, made from its current value on first use.
  torch::Tensor For(const torch::Tensor& model_param);
  // Sets the master of `model_param` to `value` (a checkpoint's fp32
  // weights) and rounds it into the model tensor.
  void Load(const torch::Tensor& model_param, const torch::Tensor& value);
  // The master of `model_param`, or an undefined tensor when it has none.
  torch::Tensor Find(const torch::Tensor& model_param) const;
  int64_t bytes() const;

 private:
  std::map<const void*, torch::Tensor> masters_;
};

class TrainableSet {
 public:
  TrainableSet() = default;
  // `model_params`: the model's tensors that train. `masters`: null for
  // fp32, else where the fp32 masters live. `group`: the ranks that train
  // together (null: this process alone; must outlive the set); `shard`
  // (memory.zero_stage 1): each rank owns a share of the tensors. `flat`
  // (memory.zero_stage 2 and 3; must outlive the set): the tensors it
  // holds train as its flat shards, the others as above.
  TrainableSet(std::vector<torch::Tensor> model_params, MasterCopies* masters,
               DataParallelGroup* group = nullptr, bool shard = false,
               FlatShards* flat = nullptr);

  // What the optimizer updates: the masters, or the model's tensors.
  const std::vector<torch::Tensor>& optimizer_params() const { return optimizer_params_; }
  const std::vector<torch::Tensor>& model_params() const { return model_params_; }
  // This rank's share of optimizer_params() that train, which its
  // optimizer holds state for (all of them unless sharded), and the flat
  // shards: those that take weight decay (matrices, and the flat shards of
  // matrices) and the rest.
  std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>> DecayGroups() const;

  // Zeroes the gradients in place (as torch::optim::Optimizer::zero_grad).
  void ZeroGrad();
  // After the micro-batches' backward: the optimizer's gradients (the
  // masters' copied up from the model's), summed over the group (the flat
  // shards' already are), clipped to global norm `max_norm` over all of
  // them. Returns the norm before clipping; fails when the group's
  // all-reduce does.
  [[nodiscard]] absl::StatusOr<double> PrepareGradients(double max_norm);
  // After the optimizer step: each tensor from its owner rank (sharded),
  // then the model's tensors from the masters, and the flat shards'
  // (FlatShards::AfterStep). Fails when the group's collective does.
  [[nodiscard]] absl::Status AfterStep();

 private:
  std::vector<torch::Tensor> model_params_;
  std::vector<torch::Tensor> optimizer_params_;
  std::vector<torch::Tensor> owned_params_;
  bool has_masters_ = false;
  DataParallelGroup* group_ = nullptr;
  // Sharded: the owner rank of each optimizer tensor; else empty.
  std::vector<int> owners_;
  FlatShards* flat_ = nullptr;
};

}  // namespace trellis::learner::internal

#endif  // TRELLIS_LEARNER_INTERNAL_TRAINABLE_H_
