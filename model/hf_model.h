#ifndef TRELLIS_MODEL_HF_MODEL_H_
#define TRELLIS_MODEL_HF_MODEL_H_

// A Hugging Face model directory loaded as a Transformer: config.json
// (model/hf_config.h) and the weights, model.safetensors or the shards that
// model.safetensors.index.json maps tensor names to. Supported: the dense
// decoders LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM and
// MistralForCausalLM, whose outputs match transformers' (model/
// hf_model_test.cc checks them on the fixtures of tests/fixtures/hf).

#include <string>

#include "absl/status/statusor.h"
#include "model/hf_config.h"
#include "model/safetensors.h"
#include "model/transformer.h"

namespace trellis::model {

struct HfModel {
  std::string dir;
  HfConfig config;
  // Under their Hugging Face names, in the stored dtype: what the
  // Transformer holds (a tied model's lm_head.weight and rotary buffers
  // such as "model.rotary_emb.inv_freq" are dropped).
  NamedTensors weights;
};

// DIR's weights: DIR/model.safetensors, else every shard that
// DIR/model.safetensors.index.json names, each read once. Fails, naming the
// file and the tensor, when a shard is missing or holds other tensors than
// the index says, and when there are no safetensors weights.
[[nodiscard]] absl::StatusOr<NamedTensors> LoadHfWeights(const std::string& dir);

// ReadHfConfig(dir), then LoadHfWeights(dir).
[[nodiscard]] absl::StatusOr<HfModel> LoadHfModel(const std::string& dir);

// A float32 Transformer of model.config holding model.weights. Fails when
// a tensor is missing, unknown or of another shape, naming it; errors start
// with model.dir. Building draws initial values under LockInitialDraws
// (model/policy.h), overwritten by the weights.
[[nodiscard]] absl::StatusOr<Transformer> NewHfTransformer(const HfModel& model);

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_HF_MODEL_H_
