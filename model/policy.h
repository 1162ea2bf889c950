#ifndef TRELLIS_MODEL_POLICY_H_
#define TRELLIS_MODEL_POLICY_H_

#include <cstdint>
#include <mutex>

#include "absl/status/statusor.h"
#include "model/transformer.h"
#include "trellis/v1/job.pb.h"

namespace trellis::model {

// Building a model draws its initial weights from LibTorch's global
// generator (torch::nn modules draw as they are constructed). A build that
// must be reproducible (the seeded policy, and what the learner draws after
// it from the same stream, its critic) holds this lock from seeding to its
// last draw; every other build in a process that may build models on
// several threads (the ranks of a learner group, embedded roles) holds it
// too, so that no build moves the stream under another. Recursive: NewPolicy
// takes it as well.
[[nodiscard]] std::unique_lock<std::recursive_mutex> LockInitialDraws();

// The policy as a job starts it, built the same way wherever it is built:
// by the learner, and by each actor under LoRA, which must hold the
// learner's frozen base (only adapters reach it). Under LockInitialDraws:
// torch::manual_seed(seed), then Transformer(config, vocab_size, head,
// lora); the base weights then come from config.init_checkpoint when it
// names one (a safetensors file of Trellis's names, or a Hugging Face
// directory), else from the Hugging Face directory config.path. Errors name
// the field and the checkpoint.
[[nodiscard]] absl::StatusOr<Transformer> NewPolicy(const trellis::v1::ModelConfig& config,
                                                    const trellis::v1::LoraConfig& lora,
                                                    int64_t vocab_size, uint64_t seed,
                                                    Head head = Head::kLanguageModel);

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_POLICY_H_
