#ifndef TRELLIS_CONFIG_JOB_SIZE_H_
#define TRELLIS_CONFIG_JOB_SIZE_H_

// How big a job is before anything is allocated: the transformer's
// dimensions and parameter count (the formulas `trellis plan` itemizes,
// tools/planner.h), and a lower bound of the memory one process of the job
// holds at its peak, checked against the machine's memory when a job is
// prepared (loop::PrepareJob), so that `resolve`, `plan`, `run` and
// `launch` refuse a job that cannot fit in well under a second instead of
// failing inside an allocation. No LibTorch.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "trellis/v1/job.pb.h"

namespace trellis::config {

// The transformer's dimensions, as model/transformer.cc derives them.
struct ModelShape {
  int64_t d = 0, L = 0, H = 0, KV = 0, hd = 0, qd = 0, kvd = 0, f = 0, V = 0;
  // A mixture of experts: E experts (0: the dense MLP of width f) of width
  // ef, k of them per token.
  int64_t E = 0, k = 0, ef = 0;
  bool tied = false, attention_bias = false, qk_norm = false;
};

// `vocab_size` is used when model.vocab_size is 0 (the tokenizer's size).
// REQUIRES: model.n_heads > 0.
ModelShape ShapeOf(const v1::ModelConfig& model, int64_t vocab_size);

// Per layer: norms, q/k/v/o, the MLP (or a mixture of experts' router and
// every expert), Qwen2's q/k/v biases, Qwen3's q/k norms; the embedding,
// final norm and LM head unless tied.
int64_t ParameterCount(const ModelShape& s);

// Bytes of the float32 KV cache of `rows` sequences of `tokens` positions:
// keys and values of every layer's n_kv_heads heads. A double: the products
// of the bounded sizes may overflow int64.
double KvCacheBytes(const ModelShape& s, double rows, double tokens);

// Bytes of optimizer state for `parameters` trained float32 parameters:
// AdamW's two tensors (exp_avg, exp_avg_sq), SGD's momentum buffer (none
// without momentum).
int64_t OptimizerStateBytes(const v1::OptimizerConfig& optimizer, int64_t parameters);

// A lower bound of the bytes the largest process of a validated `job`
// holds at its peak, each process as `trellis launch` starts them
// (config/rank_memory.h PriceProcesses): a learner rank's share of the
// weights, gradients and optimizer state under memory.zero_stage over
// deployment.learner.count ranks (adapters' only under LoRA: then the
// frozen base alone) with one micro-batch's layer outputs and log-softmax
// rows, or an actor rank's slice of the weights (tensor_parallel) and of
// the KV cache of its share of a step's samples; sequences at their
// shortest (a one-token prompt). In double: the products of the bounded
// sizes overflow int64. `what` names the process and the bound's terms.
struct MemoryFloor {
  double bytes = 0;
  std::string what;
};
MemoryFloor JobMemoryFloor(const v1::JobConfig& job);

// FailedPrecondition when JobMemoryFloor(job) exceeds `memory_bytes`,
// naming the terms, the machine's memory and the fields that size them; or
// when a process is priced above memory.process_memory_limit_bytes
// (config/rank_memory.h CheckProcessMemoryLimit, each process as `trellis
// launch` starts them; `trellis run`'s one process is checked when its
// roles are bound, run/embedded_job.cc).
// REQUIRES: ValidateJob(job) passed.
[[nodiscard]] absl::Status CheckJobFitsMemory(const v1::JobConfig& job, int64_t memory_bytes);

// This machine's physical memory in bytes.
int64_t MachineMemoryBytes();

}  // namespace trellis::config

#endif  // TRELLIS_CONFIG_JOB_SIZE_H_
