#ifndef TRELLIS_LEARNER_INTERNAL_FLAT_SHARDS_H_
#define TRELLIS_LEARNER_INTERNAL_FLAT_SHARDS_H_

// memory.zero_stage 2 and 3 across a learner group (docs/parallelism.md).
// The policy's tensors other than LoRA's adapters are grouped in units,
// one per block ("model.layers.<i>") and "outer" (embedding, final norm,
// head); each unit's tensors lie back to back in two flat buffers, the
// matrices (which take weight decay) and the vectors, each laid out by
// model/shard_layout.h's FlatUnit: rank r of N holds elements
// [r * S, (r + 1) * S). Each rank keeps its shard of every buffer: the fp32
// master the optimizer steps and, with bf16, the bf16 shard that is
// gathered. While a unit is gathered, the model's tensors are views into
// its whole buffers.
//
// Stage 2 keeps every unit gathered and gathers them again after each
// optimizer step. Stage 3 gathers a block just before its forward (starting
// the next block's gather, which overlaps this one's compute) and again
// before its backward (starting the previous block's), and frees it after
// each; the outer unit is gathered for a micro-batch and freed at its end.
// In both, as a block's backward ends its gradients are reduce-scattered
// into the masters' gradients (summed over micro-batches) and freed; the
// outer unit's at the end of the micro-batch. Every call here is a
// collective: each rank makes the same calls in the same order.

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "learner/internal/data_parallel.h"
#include "model/safetensors.h"
#include "model/shard_layout.h"
#include "model/transformer.h"

namespace trellis::learner::internal {

// The sum of squares of `params`' gradients (those defined), in float64:
// the square of their global norm.
double GradSquares(const std::vector<torch::Tensor>& params);

class FlatShards final : public model::LayerHooks {
 public:
  // Takes over `policy`'s tensors (LoRA's adapters excepted: they stay
  // whole, replicated on every rank) as shards over `group` and hooks the
  // policy's blocks. `policy` and `group` must outlive the shards.
  // REQUIRES: zero_stage 2 or 3; the policy's tensors equal on every rank.
  // Unimplemented when a unit mixes trained and frozen tensors.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<FlatShards>> Make(
      model::Transformer policy, DataParallelGroup* group, int zero_stage,
      std::string worker_id);
  ~FlatShards() override;

  // The fp32 shards the optimizer steps (trained units only): those that
  // take weight decay (matrices) and the rest.
  std::vector<torch::Tensor> decayed() const;
  std::vector<torch::Tensor> plain() const;
  // Whether the model tensor `param` lives in these shards.
  bool Holds(const torch::Tensor& param) const;

  // Around each micro-batch's forward (and backward), and around a forward
  // without autograd: the outer unit gathered; at the end, the gradients
  // not yet reduce-scattered reduced, and (stage 3) every unit freed.
  [[nodiscard]] absl::Status BeginMicro();
  [[nodiscard]] absl::Status EndMicro();

  void ZeroGrad();
  // The sum of squares of this rank's shard gradients.
  double LocalGradSquares() const;
  void ScaleGradients(double factor);
  // After the optimizer stepped the masters: the model-precision shards
  // from them; stage 2 gathers every unit again.
  [[nodiscard]] absl::Status AfterStep();

  // The documented export path: each unit in turn gathered, `fn` given its
  // tensors under their names (views valid during the call only), then
  // (stage 3) freed. No rank holds more than one unit beyond its shards.
  [[nodiscard]] absl::Status ForEachUnit(
      const std::function<absl::Status(const model::NamedTensors&)>& fn);

  // The layout of every buffer (model/flat_layout.h FlatUnitsOf the
  // policy's), this rank's model-precision shards (what the actors are
  // sent) and its fp32 master shards (a checkpoint's), in the same order.
  std::vector<model::FlatUnit> layouts() const;
  std::vector<torch::Tensor> shards() const;
  std::vector<torch::Tensor> masters() const;
  // Sets this rank's masters (and model-precision shards; stage 2: the
  // whole tensors, gathered) from `values`, one per buffer in layouts()'s
  // order. FailedPrecondition, changing nothing, when a frozen buffer's
  // value differs from its own. REQUIRES: shapes as masters().
  [[nodiscard]] absl::Status LoadMasters(const std::vector<torch::Tensor>& values);

  // Bytes this rank holds: its model-precision shards (the parameters'),
  // the fp32 masters beside them under bf16 (0 under fp32, where the
  // shards are the masters), the shards' gradients, the gathered whole
  // buffers now and at most since the last TakeGatheredPeak.
  int64_t shard_bytes() const;
  int64_t master_bytes() const;
  int64_t gradient_bytes() const;
  int64_t gathered_bytes() const { return gathered_bytes_; }
  int64_t TakeGatheredPeak();

  // model::LayerHooks. A failed collective throws c10::Error.
  void BeforeForward(int64_t layer) override;
  void AfterForward(int64_t layer) override;
  void BeforeBackward(int64_t layer) override;
  void AfterBackward(int64_t layer) override;

 private:
  struct Buffer {
    model::FlatUnit layout;
    std::vector<torch::Tensor> params;  // the model's tensors, views into full
    torch::Tensor full;                 // [N * S], model precision
    torch::Tensor shard;                // [S], model precision: what is gathered
    torch::Tensor master;               // [S] fp32 (shard itself under fp32)
    bool trained = false;
  };
  struct Unit {
    std::vector<Buffer> buffers;
    bool gathered = false;
    // The waits of a gather started and not yet waited for.
    std::vector<std::function<absl::Status()>> pending;
    int64_t bytes() const;
  };

  FlatShards(model::Transformer policy, DataParallelGroup* group, int zero_stage,
             std::string worker_id);
  // Gathers unit `u` unless it is (starting it unless started).
  absl::Status StartGather(Unit& unit);
  absl::Status Gather(Unit& unit);
  // Stage 3: frees the unit's whole buffers.
  void Release(Unit& unit);
  // Reduce-scatters the unit's gradients into its masters' and frees them;
  // nothing when no tensor of it has a gradient.
  absl::Status Reduce(Unit& unit);
  // Throws c10::Error for a failed hook.
  void Check(const absl::Status& s, const char* what, int64_t layer) const;

  model::Transformer policy_;
  DataParallelGroup* const group_;
  const int zero_stage_;
  const std::string worker_id_;
  // units_[0] is "outer", units_[i + 1] block i.
  std::vector<Unit> units_;
  // The model tensors the buffers hold (Holds).
  std::unordered_set<const void*> held_;
  int64_t gathered_bytes_ = 0;
  int64_t gathered_peak_ = 0;
};

}  // namespace trellis::learner::internal

#endif  // TRELLIS_LEARNER_INTERNAL_FLAT_SHARDS_H_
