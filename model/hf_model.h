#ifndef TRELLIS_MODEL_HF_MODEL_H_
#define TRELLIS_MODEL_HF_MODEL_H_

// A Hugging Face model directory loaded as a Transformer: config.json
// (model/hf_config.h) and the weights, model.safetensors or the shards that
// model.safetensors.index.json maps tensor names to. Supported: the dense
// decoders LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM and
// MistralForCausalLM and the mixtures of experts Qwen3MoeForCausalLM and
// MixtralForCausalLM, whose outputs match transformers' (model/
// hf_model_test.cc checks them on the fixtures of tests/fixtures/hf).
// Experts load from one matrix per expert or stacked (model/hf_experts.h).

#include <cstdint>
#include <optional>
#include <string>

#include <torch/torch.h>

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
  // such as "model.rotary_emb.inv_freq" are dropped), a mixture of
  // experts' experts as the checkpoint lays them out.
  NamedTensors weights;
};

// DIR's weights: DIR/model.safetensors, else every shard that
// DIR/model.safetensors.index.json names, each read once through its
// memory mapping (model/safetensors.h SafetensorsReader), in the stored
// dtype or with floating-point tensors converted to `dtype`. Fails, naming
// the file and the tensor, when a shard is missing or holds other tensors
// than the index says, and when there are no safetensors weights.
[[nodiscard]] absl::StatusOr<NamedTensors> LoadHfWeights(
    const std::string& dir, std::optional<torch::ScalarType> dtype = std::nullopt);

// ReadHfConfig(dir), then LoadHfWeights(dir) in the stored dtype: the eager
// path, holding every tensor before NewHfTransformer copies them into a
// model (two copies of the weights at its peak).
[[nodiscard]] absl::StatusOr<HfModel> LoadHfModel(const std::string& dir);

// A float32 Transformer of model.config holding model.weights (experts
// stacked, model/hf_experts.h). Fails when a tensor is missing, unknown,
// given twice or of another shape, naming it; errors start
// with model.dir. Built with InitialValues::kOverwritten: no initial
// values are drawn.
[[nodiscard]] absl::StatusOr<Transformer> NewHfTransformer(const HfModel& model);

struct HfLoadOptions {
  // The parameters' dtype: float32 (what jobs train in today; the learner
  // casts to bfloat16 itself for memory.precision bf16), bfloat16 or
  // float16; nullopt keeps the stored one (HfConfig::dtype).
  std::optional<torch::ScalarType> dtype = torch::kFloat32;
};

// What LoadHfTransformer did. For the run's ledger (ledger/ledger.h): the
// caller runs the load inside a Stage::kLoad span, whose peak is then the
// load's, and reports Object::kParameters at parameter_bytes.
struct HfLoadStats {
  int64_t file_bytes = 0;       // tensor bytes read from the safetensors files
  int64_t parameter_bytes = 0;  // the Transformer's parameters
  int64_t tensors = 0;          // tensors copied in
  double build_seconds = 0;     // building the Transformer (allocating it)
  double fill_seconds = 0;      // opening the files and copying the weights in
};

// The streaming load of DIR: ReadHfConfig, the Transformer built as
// NewHfTransformer builds it (then cast to options.dtype), every file's
// header read and every tensor's name and shape checked against the
// parameters, then each tensor copied from its memory-mapped file straight
// into its parameter, converting the dtype. The process holds one copy of
// the weights and about one SafetensorsReader::kChunkBytes chunk of a file
// beyond what it held before (docs/models.md has the measured peak).
// Errors name the file and the tensor: a missing, unknown or misshapen
// tensor, a missing shard or one holding other tensors than the index
// says. `stats` may be null.
[[nodiscard]] absl::StatusOr<Transformer> LoadHfTransformer(const std::string& dir,
                                                            const HfLoadOptions& options = {},
                                                            HfLoadStats* stats = nullptr);

// LoadHfTransformer's fill, into a model already built with DIR's shape
// (model/hf_config.h ResolveHfModel): DIR's weights streamed into its base
// weights; a LoRA policy's adapters and a scalar head (a reward model
// started from a language model; the directory's lm_head.weight is not
// read) keep their values. Errors as
// LoadHfTransformer's; `stats` (may be null) gets everything but
// build_seconds.
[[nodiscard]] absl::Status FillFromHfDir(const std::string& dir, Transformer& model,
                                         HfLoadStats* stats = nullptr);

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_HF_MODEL_H_
