#ifndef TRELLIS_MODEL_ROPE_H_
#define TRELLIS_MODEL_ROPE_H_

// Rotary position embeddings as Hugging Face's Llama family computes them:
// the inverse frequencies (plain, or rescaled as ModelConfig.rope_scaling
// asks) and their application to queries and keys.

#include <cstdint>

#include <torch/torch.h>

#include "trellis/v1/job.pb.h"

namespace trellis::model {

// [head_dim / 2] float32: 1 / rope_theta^(2i / head_dim), then rescaled by
// config.rope_scaling (LLAMA3: Llama 3.1's frequency bands), computed in
// float32 as transformers does.
torch::Tensor RotaryInverseFrequencies(const trellis::v1::ModelConfig& config, int64_t head_dim);

// x * cos + rotate_half(x) * sin, where rotate_half splits the last
// dimension into halves (x1, x2) and returns (-x2, x1). cos, sin
// broadcast against x ([B, 1, T, head_dim] for x [B, H, T, head_dim]).
torch::Tensor ApplyRotary(const torch::Tensor& x, const torch::Tensor& cos,
                          const torch::Tensor& sin);

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_ROPE_H_
