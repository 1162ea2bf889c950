#ifndef TRELLIS_ACTOR_SAMPLING_H_
#define TRELLIS_ACTOR_SAMPLING_H_

#include <ATen/core/Generator.h>
#include <torch/torch.h>

#include "trellis/v1/rollout.pb.h"

namespace trellis::actor {

struct SampledTokens {
  torch::Tensor tokens;    // [B] int64
  // log softmax(logits / temperature) at the chosen token: the log-prob the
  // learner recomputes (top-p only narrows the choice, it does not change
  // the policy being optimized).
  torch::Tensor logprobs;  // [B] float32
};

// Draws one token per row of `logits` [B, V]: argmax when params.greedy,
// otherwise from softmax(logits / temperature) restricted to the top-p
// nucleus. Deterministic for a given generator state.
SampledTokens SampleNext(const torch::Tensor& logits,
                         const v1::SamplingParams& params,
                         at::Generator& generator);

}  // namespace trellis::actor

#endif  // TRELLIS_ACTOR_SAMPLING_H_
