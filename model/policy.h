#ifndef TRELLIS_MODEL_POLICY_H_
#define TRELLIS_MODEL_POLICY_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "model/transformer.h"
#include "trellis/v1/job.pb.h"

namespace trellis::model {

// The policy as a job starts it, built the same way wherever it is built:
// by the learner, and by each actor under LoRA, which must hold the
// learner's frozen base (only adapters reach it). torch::manual_seed(seed),
// then Transformer(config, vocab_size, head, lora); the base weights then
// come from config.init_checkpoint (plain Llama weights) when it names one.
// Errors name the checkpoint.
[[nodiscard]] absl::StatusOr<Transformer> NewPolicy(const trellis::v1::ModelConfig& config,
                                                    const trellis::v1::LoraConfig& lora,
                                                    int64_t vocab_size, uint64_t seed,
                                                    Head head = Head::kLanguageModel);

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_POLICY_H_
