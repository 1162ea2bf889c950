#ifndef TRELLIS_MODEL_DECODER_H_
#define TRELLIS_MODEL_DECODER_H_

// What inference runs a model through, so that the rollout engine
// (actor/internal/engine.h) and the reference's log-probs
// (model/token_batch.h TargetLogProbs) run the same on one Transformer
// (TransformerDecoder) and on a tensor-parallel group of them
// (model/tensor_parallel.h).

#include <torch/torch.h>

#include <cstdint>

#include "model/transformer.h"
#include "trellis/v1/job.pb.h"

namespace trellis::model {

class Decoder {
 public:
  virtual ~Decoder() = default;

  // As TransformerImpl's: the final norm's output, the head on it, an
  // empty KV cache, the model's shape and vocabulary.
  virtual torch::Tensor Hidden(const torch::Tensor& tokens, const torch::Tensor& positions,
                               const torch::Tensor& key_valid, KVCache* cache,
                               ExpertRouting* routing) = 0;
  virtual torch::Tensor ApplyHead(const torch::Tensor& hidden) = 0;
  virtual KVCache NewCache(int64_t batch, int64_t capacity) const = 0;
  virtual const trellis::v1::ModelConfig& config() const = 0;
  virtual int64_t vocab_size() const = 0;

  // ApplyHead(Hidden(...)), as TransformerImpl::forward.
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& positions,
                        const torch::Tensor& key_valid = {}, KVCache* cache = nullptr,
                        ExpertRouting* routing = nullptr);
};

// One Transformer as a Decoder. REQUIRES: `model` outlives it.
class TransformerDecoder final : public Decoder {
 public:
  explicit TransformerDecoder(TransformerImpl& model) : model_(model) {}

  torch::Tensor Hidden(const torch::Tensor& tokens, const torch::Tensor& positions,
                       const torch::Tensor& key_valid, KVCache* cache,
                       ExpertRouting* routing) override;
  torch::Tensor ApplyHead(const torch::Tensor& hidden) override;
  KVCache NewCache(int64_t batch, int64_t capacity) const override;
  const trellis::v1::ModelConfig& config() const override { return model_.config(); }
  int64_t vocab_size() const override { return model_.vocab_size(); }

 private:
  TransformerImpl& model_;
};

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_DECODER_H_
