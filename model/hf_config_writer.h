#ifndef TRELLIS_MODEL_HF_CONFIG_WRITER_H_
#define TRELLIS_MODEL_HF_CONFIG_WRITER_H_

// config.json and generation_config.json written for an HfConfig, the
// inverse of model/hf_config.h: ParseHfConfig reads the text back into the
// same ModelConfig (the job's own fields apart).
//
// The layout is transformers 5's (rope_parameters, dtype) with the keys
// transformers 4 reads beside it (rope_theta, rope_scaling, torch_dtype),
// so that both versions, and servers built on either, find the same model.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/hf_config.h"

namespace trellis::model {

// The special token ids written to config.json and generation_config.json;
// absent ids are left out.
struct HfTokenIds {
  std::optional<int64_t> bos;
  // One id is written as a number, several as a list (Llama 3's).
  std::vector<int64_t> eos;
  std::optional<int64_t> pad;
};

// config.json for `config` and `ids`. max_position_embeddings is
// config.model's, or its max_seq_len when that is 0 (Trellis's built-in
// model); Mistral's and Mixtral's sliding_window is written as that same
// limit, within which attention is full. Fails, naming the field, when the
// architecture cannot express config.model (query/key norms other than on
// Qwen3 and Qwen3-MoE, query/key/value biases other than on Qwen2, experts
// other than on Qwen3-MoE and Mixtral, a Mixtral without renormalized
// expert weights) or the dtype has no name.
[[nodiscard]] absl::StatusOr<std::string> HfConfigJson(const HfConfig& config,
                                                       const HfTokenIds& ids);

// generation_config.json: the ids, as transformers derives it from
// config.json.
std::string HfGenerationConfigJson(const HfTokenIds& ids);

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_HF_CONFIG_WRITER_H_
