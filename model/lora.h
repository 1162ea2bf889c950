#ifndef TRELLIS_MODEL_LORA_H_
#define TRELLIS_MODEL_LORA_H_

// Low-rank adapters (LoRA, Hu et al. 2021) on the transformer's projections
// (job.proto LoraConfig).

#include <cstdint>
#include <string_view>
#include <vector>

#include <torch/torch.h>

#include "trellis/v1/job.pb.h"

namespace trellis::model {

// What a build puts in the parameters (TransformerImpl, LoraLinearImpl).
enum class InitialValues {
  // A fresh model, drawn from LibTorch's default generator.
  kDrawn,
  // Nothing: the values are undefined until a load overwrites every
  // parameter (model/hf_model.h); no draws are made.
  kOverwritten,
};

// A projection y = x W^T (+ b) that may carry a low-rank adapter:
//   y = x W^T + b + (alpha / rank) * (x A^T) B^T
// with A [rank, in] and B [out, rank]. W (and b) are created, named
// ("weight", "bias") and drawn exactly as torch::nn::Linear's, so adding
// adapters to a model does not change its base weights under the same seed. A and B are registered
// as "lora_A.weight" and "lora_B.weight" (PEFT's names without an adapter
// name) and start undrawn: call ResetAdapter.
class LoraLinearImpl : public torch::nn::LinearImpl {
 public:
  // rank 0: a plain projection without an adapter (alpha unused). bias:
  // whether b exists (Qwen2's query, key and value projections). With
  // kOverwritten, W and b are allocated without drawing.
  LoraLinearImpl(int64_t in, int64_t out, int64_t rank, double alpha, bool bias = false,
                 InitialValues init = InitialValues::kDrawn);

  torch::Tensor forward(const torch::Tensor& x);

  bool has_adapter() const { return lora_A_.defined(); }

  // A ~ U(-1/sqrt(in), 1/sqrt(in)) (torch::nn::Linear's kaiming-uniform
  // with a = sqrt(5)) and B = 0, so a fresh adapter changes nothing. No-op
  // without an adapter.
  void ResetAdapter();

  // W + (alpha / rank) B A as a new tensor without autograd history; W
  // itself (detached) without an adapter.
  torch::Tensor MergedWeight() const;

 private:
  torch::Tensor lora_A_;  // [rank, in]
  torch::Tensor lora_B_;  // [out, rank]
  double scale_ = 0;      // alpha / rank
};
TORCH_MODULE(LoraLinear);

// Whether `name` is an adapter's tensor (ends in ".lora_A.weight" or
// ".lora_B.weight").
bool IsAdapterName(std::string_view name);

// The projections `lora` names in target_modules; q_proj and v_proj when it
// names none.
std::vector<trellis::v1::LoraConfig::Projection> LoraTargets(const trellis::v1::LoraConfig& lora);

// Whether `lora` (rank > 0) adapts `projection`.
bool IsLoraTarget(const trellis::v1::LoraConfig& lora,
                  trellis::v1::LoraConfig::Projection projection);

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_LORA_H_
