#ifndef TRELLIS_MODEL_TESTING_SHARDED_CHECKPOINT_H_
#define TRELLIS_MODEL_TESTING_SHARDED_CHECKPOINT_H_

// A Llama-shaped Hugging Face directory written from a Transformer, for the
// loader's tests and bench/hf_load_bench: config.json, the weights in
// `shards` safetensors files of about equal size and
// model.safetensors.index.json mapping each tensor to its file.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "env/env.h"
#include "model/safetensors.h"
#include "model/transformer.h"

namespace trellis::model::testing {

// config.json of a LlamaForCausalLM with `model`'s shape, float32 weights.
inline std::string LlamaConfigJson(const TransformerImpl& model) {
  const trellis::v1::ModelConfig& c = model.config();
  std::string head_dim;
  if (c.head_dim() > 0) head_dim = absl::StrCat("\"head_dim\": ", c.head_dim(), ", ");
  return absl::StrCat(
      "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", ",
      "\"dtype\": \"float32\", \"hidden_act\": \"silu\", \"hidden_size\": ", c.d_model(),
      ", \"intermediate_size\": ", c.d_ff(), ", \"num_hidden_layers\": ", c.n_layers(),
      ", \"num_attention_heads\": ", c.n_heads(), ", \"num_key_value_heads\": ", c.n_kv_heads(),
      ", ", head_dim, "\"vocab_size\": ", model.vocab_size(),
      ", \"rms_norm_eps\": ", c.rms_norm_eps(), ", \"rope_theta\": ", c.rope_theta(),
      ", \"tie_word_embeddings\": ", c.tie_embeddings() ? "true" : "false", "}\n");
}

// Writes `model` (no LoRA) to DIR as config.json, `shards` files
// model-0000i-of-0000n.safetensors (consecutive tensors, a new file once a
// file holds its share of the bytes) and the index. Returns the weights'
// bytes through *bytes (may be null).
inline absl::Status WriteShardedLlama(const std::string& dir, const TransformerImpl& model,
                                      int shards, int64_t* bytes = nullptr) {
  env::Env* env = env::Env::Default();
  if (absl::Status s = env->CreateDir(dir); !s.ok()) return s;
  if (absl::Status s = env->WriteFileAtomically(dir + "/config.json", LlamaConfigJson(model));
      !s.ok()) {
    return s;
  }
  const std::vector<std::pair<std::string, torch::Tensor>> weights = model.NamedWeights();
  int64_t total = 0;
  for (const auto& [name, t] : weights) total += static_cast<int64_t>(t.nbytes());
  if (bytes != nullptr) *bytes = total;
  std::vector<std::string> map;
  NamedTensors shard;
  int64_t written = 0;
  int index = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    shard.push_back(weights[i]);
    written += static_cast<int64_t>(weights[i].second.nbytes());
    const bool last = i + 1 == weights.size();
    if (!last && written * shards < total * (index + 1)) continue;
    const std::string file = absl::StrFormat("model-%05d-of-%05d.safetensors", index + 1, shards);
    if (absl::Status s = SaveSafetensors(dir + "/" + file, shard); !s.ok()) return s;
    for (const auto& [name, t] : shard)
      map.push_back(absl::StrCat("\"", name, "\": \"", file, "\""));
    shard.clear();
    ++index;
  }
  if (index != shards) {
    return absl::InvalidArgumentError(absl::StrCat("WriteShardedLlama: ", weights.size(),
                                                   " tensors do not fill ", shards, " shards"));
  }
  return env->WriteFileAtomically(
      dir + "/model.safetensors.index.json",
      absl::StrCat("{\"metadata\": {\"total_size\": ", total, "}, \"weight_map\": {",
                   absl::StrJoin(map, ", "), "}}\n"));
}

}  // namespace trellis::model::testing

#endif  // TRELLIS_MODEL_TESTING_SHARDED_CHECKPOINT_H_
