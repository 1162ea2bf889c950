#ifndef TRELLIS_ACTOR_SAMPLING_H_
#define TRELLIS_ACTOR_SAMPLING_H_

#include <torch/torch.h>

#include "trellis/v1/rollout.pb.h"

namespace trellis::actor {

struct SampledTokens {
  torch::Tensor tokens;  // [B] int64
  // log softmax(logits / temperature) at the chosen token: the log-prob the
  // learner recomputes (top-p only narrows the choice, it does not change
  // the policy being optimized).
  torch::Tensor logprobs;  // [B] float32
};

// Draws one token per row of `logits` [B, V]: argmax when params.greedy,
// otherwise by inverse CDF from softmax(logits / temperature) restricted to
// the top-p nucleus: row b takes the first token (in vocabulary order)
// whose cumulative kept probability exceeds uniforms[b] times the kept
// mass. `uniforms` [B] float64 in [0, 1) (unused when greedy). A row's
// token depends on its own logits and uniform only, never on the other
// rows.
SampledTokens SampleNext(const torch::Tensor& logits, const v1::SamplingParams& params,
                         const torch::Tensor& uniforms);

}  // namespace trellis::actor

#endif  // TRELLIS_ACTOR_SAMPLING_H_
