#ifndef TRELLIS_MODEL_TENSOR_PARALLEL_H_
#define TRELLIS_MODEL_TENSOR_PARALLEL_H_

// A tensor-parallel group (deployment.actor.tensor_parallel and
// deployment.reference.tensor_parallel: K): one model computed by K ranks,
// each a Transformer of the model's shape with n_heads, n_kv_heads and d_ff
// divided by K. Each rank holds the slice of every tensor that
// model/shard_layout.h TensorParallelSlice names (column parallel q, k, v,
// gate and up projections, row parallel o and down projections, the rest
// whole), so every rank computes whole query and key/value heads and MLP
// columns, and each block's o_proj and down_proj give partial sums that one
// all-reduce per projection adds up (model/internal/tensor_parallel_reduce.h).
// The KV cache is split by heads: each rank reads and writes its
// n_kv_heads / K heads of it.
//
// The ranks are threads of one process (docs/parallelism.md,
// "Tensor-parallel actors and reference"), by default all on the model's
// device, summing in memory between two barriers; PlaceRanks puts each on a
// device of its own, and on K distinct CUDA devices they sum with NCCL
// (model/internal/tensor_parallel_reduce.h). For inference: the ranks'
// parameters do not require gradients. Not for a mixture of experts (its
// experts are not split).

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/decoder.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "trellis/v1/job.pb.h"

namespace trellis::model {
namespace internal {
class RankAllReduce;
}  // namespace internal

class TensorParallelModel final : public Decoder {
 public:
  // A group of `k` ranks of the model `config` (with LoRA adapters where
  // `lora` targets them), on the CPU, its weights unset until LoadWeights.
  // InvalidArgument, naming the field, when k is outside [1, 64] or does not
  // divide n_heads, n_kv_heads and d_ff, or the model is a mixture of
  // experts.
  static absl::StatusOr<std::unique_ptr<TensorParallelModel>> Create(
      const trellis::v1::ModelConfig& config, int64_t vocab_size, int k,
      const trellis::v1::LoraConfig& lora = trellis::v1::LoraConfig());

  // A group of `k` holding `whole`'s weights (LoadWeights), on its device.
  // `lora`: whole's adapters, as Create takes them. Fails as Create.
  static absl::StatusOr<std::unique_ptr<TensorParallelModel>> Split(
      TransformerImpl& whole, int k,
      const trellis::v1::LoraConfig& lora = trellis::v1::LoraConfig());

  // The shape each rank of `k` builds: n_heads, n_kv_heads and d_ff divided
  // by k, head_dim explicit (the whole model's). REQUIRES: k divides them.
  static trellis::v1::ModelConfig RankConfig(const trellis::v1::ModelConfig& config, int k);

  // Copies whole-model tensors in by name (Hugging Face names, as
  // TransformerImpl::NamedWeights gives them), each rank its slice; the
  // tensors not named keep their values. Fails, changing nothing, with a
  // message naming the tensor, when a name is not the model's or a shape
  // differs from the whole model's.
  [[nodiscard]] absl::Status LoadWeights(const NamedTensors& whole);
  // Copies rank `rank`'s slices in by name (the tensors TensorParallelSlice
  // cuts for that rank, as a resharding weight sync would send them). Fails
  // as LoadWeights, and when rank is outside [0, k).
  [[nodiscard]] absl::Status LoadRankWeights(int rank, const NamedTensors& slices);

  ~TensorParallelModel() override;

  // Moves every rank to `device`; they sum in memory.
  void to(const torch::Device& device);
  // Moves rank r to devices[r]. On k distinct CUDA devices the ranks sum
  // with NCCL (model/internal/nccl_all_reduce.h), else in memory (copying
  // the partials between devices). The KV cache stays whole on rank 0's
  // device: a rank elsewhere copies its heads over at each forward and its
  // new positions back. InvalidArgument unless there are k devices;
  // FailedPrecondition when NCCL's all-reduce cannot be made (a build
  // without NCCL, a device not visible); either moves nothing.
  [[nodiscard]] absl::Status PlaceRanks(const std::vector<torch::Device>& devices);
  // How the ranks sum their partials: "nccl" or "in-memory".
  std::string_view all_reduce() const { return nccl_ ? "nccl" : "in-memory"; }
  int k() const { return static_cast<int>(ranks_.size()); }
  TransformerImpl& rank(int r) { return *ranks_.at(r); }
  // Every rank's parameters (for the ledger and host offload).
  std::vector<torch::Tensor> parameters() const;

  // Each rank on a thread of its own (rank 0 on the caller's), the same
  // inputs to all, `cache` (NewCache's) split by heads among them; the
  // first failing rank's exception is rethrown once every rank has stopped.
  // `routing` goes to rank 0 (a dense model's has nothing to record).
  torch::Tensor Hidden(const torch::Tensor& tokens, const torch::Tensor& positions,
                       const torch::Tensor& key_valid, KVCache* cache,
                       ExpertRouting* routing) override;
  // Rank 0's head (whole on every rank).
  torch::Tensor ApplyHead(const torch::Tensor& hidden) override;
  // A cache of every key/value head, [batch, n_kv_heads, capacity, head_dim]
  // per layer, on the ranks' device.
  KVCache NewCache(int64_t batch, int64_t capacity) const override;
  // The whole model's shape.
  const trellis::v1::ModelConfig& config() const override { return config_; }
  int64_t vocab_size() const override { return ranks_[0]->vocab_size(); }

 private:
  TensorParallelModel(trellis::v1::ModelConfig config, std::vector<Transformer> ranks);

  // Checks and copies `pieces` [rank][tensor] into the ranks' tensors.
  absl::Status CopyIn(const std::vector<int>& ranks, const std::vector<NamedTensors>& pieces);

  trellis::v1::ModelConfig config_;
  std::vector<Transformer> ranks_;
  std::vector<torch::Device> devices_;  // rank r's
  // The ranks' all-reduce; one forward at a time uses it.
  std::unique_ptr<internal::RankAllReduce> reduce_;
  bool nccl_ = false;
  std::mutex forward_mu_;
};

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_TENSOR_PARALLEL_H_
