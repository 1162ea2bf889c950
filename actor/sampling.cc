#include "actor/sampling.h"

namespace trellis::actor {

SampledTokens SampleNext(const torch::Tensor& logits,
                         const v1::SamplingParams& params,
                         at::Generator& generator) {
  const double temperature =
      params.greedy() || params.temperature() <= 0 ? 1.0 : params.temperature();
  torch::Tensor logp = torch::log_softmax(logits.to(torch::kFloat32) / temperature, -1);
  torch::Tensor tokens;
  if (params.greedy()) {
    tokens = logp.argmax(-1);
  } else {
    torch::Tensor probs = logp.exp();
    const double top_p = params.top_p() <= 0 ? 1.0 : params.top_p();
    if (top_p < 1.0) {
      auto [sorted, order] = probs.sort(-1, /*descending=*/true);
      // Keep a token when the mass before it is below top_p; the most
      // likely token is always kept.
      torch::Tensor before = sorted.cumsum(-1) - sorted;
      sorted = sorted.masked_fill(before >= top_p, 0.0);
      torch::Tensor pick = at::multinomial(sorted, 1, false, generator);
      tokens = order.gather(-1, pick).squeeze(-1);
    } else {
      tokens = at::multinomial(probs, 1, false, generator).squeeze(-1);
    }
  }
  torch::Tensor chosen = logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1);
  return {tokens, chosen};
}

}  // namespace trellis::actor
