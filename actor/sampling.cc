#include "actor/sampling.h"

namespace trellis::actor {

SampledTokens SampleNext(const torch::Tensor& logits, const v1::SamplingParams& params,
                         const torch::Tensor& uniforms) {
  const double temperature =
      params.greedy() || params.temperature() <= 0 ? 1.0 : params.temperature();
  torch::Tensor logp = torch::log_softmax(logits.to(torch::kFloat32) / temperature, -1);
  torch::Tensor tokens;
  if (params.greedy()) {
    tokens = logp.argmax(-1);
  } else {
    // Float64 sums, so that the cumulative mass is far less noisy than the
    // float32 logits it comes from.
    torch::Tensor probs = logp.exp().to(torch::kFloat64);
    const double top_p = params.top_p() <= 0 ? 1.0 : params.top_p();
    if (top_p < 1.0) {
      auto [sorted, order] = probs.sort(-1, /*descending=*/true);
      // Keep a token when the mass before it is below top_p; the most
      // likely token is always kept.
      torch::Tensor drop = (sorted.cumsum(-1) - sorted) >= top_p;
      probs = probs.masked_fill(torch::zeros_like(drop).scatter(-1, order, drop), 0.0);
    }
    torch::Tensor cumulative = probs.cumsum(-1);
    torch::Tensor target =
        uniforms.to(cumulative.device(), torch::kFloat64) * cumulative.select(-1, -1);
    // The first token whose cumulative mass exceeds the target; a target
    // rounded up onto the total falls back to the last kept token.
    tokens = (cumulative <= target.unsqueeze(-1)).sum(-1);
    torch::Tensor last_kept = (probs > 0).cumsum(-1).argmax(-1);
    tokens = torch::minimum(tokens, last_kept);
  }
  torch::Tensor chosen = logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1);
  return {tokens, chosen};
}

}  // namespace trellis::actor
