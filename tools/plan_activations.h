#ifndef TRELLIS_TOOLS_PLAN_ACTIVATIONS_H_
#define TRELLIS_TOOLS_PLAN_ACTIVATIONS_H_

// What a training forward keeps for its backward, per token (the learner's
// "activations" object), under the memory strategies of job.memory and
// LoRA: the planner's model of it (tools/planner.h).

#include <cstdint>
#include <string>

#include "config/job_size.h"
#include "trellis/v1/job.pb.h"

namespace trellis::tools {

// Bytes of a float32 element: every tensor the plan counts is float32
// unless a strategy says bf16.
inline constexpr int64_t kFloat = 4;

// The memory strategies of job.memory that change the learner's objects.
struct Strategy {
  // Bytes of a weight, activation or gradient element in the model (2 for
  // bf16), and whether fp32 masters are kept.
  int64_t weight_bytes = kFloat;
  bool masters = false;
  bool checkpointing = false;
  // LoRA's adapters (rank 0: every weight trains).
  v1::LoraConfig lora;
};

Strategy StrategyOf(const v1::JobConfig& job);

// Bytes the forward keeps for backward per token of a training micro-batch.
int64_t ActivationBytesPerToken(const config::ModelShape& s, const Strategy& st);

// ActivationBytesPerToken as a formula for the plan's line.
std::string ActivationFormula(const config::ModelShape& s, const Strategy& st);

}  // namespace trellis::tools

#endif  // TRELLIS_TOOLS_PLAN_ACTIVATIONS_H_
