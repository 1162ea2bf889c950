#include "config/flops.h"

#include <functional>

namespace trellis::config {
namespace {

using PerToken = std::function<double(const v1::ModelConfig&, int64_t, int64_t)>;

double SumOverSequences(const PerToken& per_token, const v1::ModelConfig& model, int64_t vocab_size,
                        absl::Span<const int64_t> lengths) {
  double flops = 0;
  for (const int64_t n : lengths) {
    if (n > 0) flops += static_cast<double>(n) * per_token(model, vocab_size, n);
  }
  return flops;
}

}  // namespace

int64_t MatmulParameters(const ModelShape& s) {
  const int64_t mlp = s.E > 0 ? s.E * s.d + s.k * 3 * s.d * s.ef : 3 * s.d * s.f;
  return s.L * (2 * s.d * s.qd + 2 * s.d * s.kvd + mlp) + s.V * s.d;
}

double TrainFlopsPerToken(const v1::ModelConfig& model, int64_t vocab_size, int64_t seq) {
  const ModelShape s = ShapeOf(model, vocab_size);
  return 6.0 * MatmulParameters(s) + 12.0 * s.L * seq * s.d;
}

double ForwardFlopsPerToken(const v1::ModelConfig& model, int64_t vocab_size, int64_t seq) {
  const ModelShape s = ShapeOf(model, vocab_size);
  return 2.0 * MatmulParameters(s) + 4.0 * s.L * seq * s.d;
}

double TrainFlops(const v1::ModelConfig& model, int64_t vocab_size,
                  absl::Span<const int64_t> lengths) {
  return SumOverSequences(TrainFlopsPerToken, model, vocab_size, lengths);
}

double ForwardFlops(const v1::ModelConfig& model, int64_t vocab_size,
                    absl::Span<const int64_t> lengths) {
  return SumOverSequences(ForwardFlopsPerToken, model, vocab_size, lengths);
}

double ForwardFlopsOfWork(const v1::ModelConfig& model, int64_t vocab_size, int64_t positions,
                          int64_t attention_pairs) {
  const ModelShape s = ShapeOf(model, vocab_size);
  return 2.0 * MatmulParameters(s) * static_cast<double>(positions) +
         4.0 * s.L * s.d * static_cast<double>(attention_pairs);
}

}  // namespace trellis::config
