#include "model/decoder.h"

namespace trellis::model {

torch::Tensor Decoder::forward(const torch::Tensor& tokens, const torch::Tensor& positions,
                               const torch::Tensor& key_valid, KVCache* cache,
                               ExpertRouting* routing) {
  return ApplyHead(Hidden(tokens, positions, key_valid, cache, routing));
}

torch::Tensor TransformerDecoder::Hidden(const torch::Tensor& tokens,
                                         const torch::Tensor& positions,
                                         const torch::Tensor& key_valid, KVCache* cache,
                                         ExpertRouting* routing) {
  return model_.Hidden(tokens, positions, key_valid, cache, routing);
}

torch::Tensor TransformerDecoder::ApplyHead(const torch::Tensor& hidden) {
  return model_.ApplyHead(hidden);
}

KVCache TransformerDecoder::NewCache(int64_t batch, int64_t capacity) const {
  return model_.NewCache(batch, capacity);
}

}  // namespace trellis::model
