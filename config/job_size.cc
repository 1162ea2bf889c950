#include "config/job_size.h"

#include <unistd.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "config/rank_memory.h"

namespace trellis::config {
namespace {

constexpr double kFloat = 4;

}  // namespace

ModelShape ShapeOf(const v1::ModelConfig& m, int64_t vocab_size) {
  ModelShape s;
  s.d = m.d_model();
  s.L = m.n_layers();
  s.H = m.n_heads();
  s.KV = m.n_kv_heads();
  s.hd = m.head_dim() > 0 ? m.head_dim() : s.d / s.H;
  s.qd = s.H * s.hd;
  s.kvd = s.KV * s.hd;
  s.f = m.d_ff();
  s.V = m.vocab_size() > 0 ? m.vocab_size() : vocab_size;
  s.tied = m.tie_embeddings();
  s.attention_bias = m.attention_bias();
  s.qk_norm = m.qk_norm();
  if (m.num_experts() > 0) {
    s.E = m.num_experts();
    s.k = m.experts_per_token();
    s.ef = m.expert_d_ff() > 0 ? m.expert_d_ff() : m.d_ff();
  }
  return s;
}

int64_t ParameterCount(const ModelShape& s) {
  const int64_t extras = (s.attention_bias ? s.qd + 2 * s.kvd : 0) + (s.qk_norm ? 2 * s.hd : 0);
  const int64_t mlp = s.E > 0 ? s.E * (s.d + 3 * s.d * s.ef) : 3 * s.d * s.f;
  return s.V * s.d + s.L * (2 * s.d + 2 * s.d * s.qd + 2 * s.d * s.kvd + mlp + extras) + s.d +
         (s.tied ? 0 : s.V * s.d);
}

double KvCacheBytes(const ModelShape& s, double rows, double tokens) {
  return kFloat * 2.0 * s.L * s.KV * s.hd * tokens * rows;
}

int64_t OptimizerStateBytes(const v1::OptimizerConfig& o, int64_t parameters) {
  if (o.name() == v1::OptimizerConfig::SGD) return o.momentum() > 0 ? 4 * parameters : 0;
  return 2 * 4 * parameters;
}

MemoryFloor JobMemoryFloor(const v1::JobConfig& job) {
  // vocab_size 0 (the tokenizer's, not known yet) counts no vocabulary.
  MemoryFloor floor;
  for (const ProcessPrice& p : PriceProcesses(job, ProcessLayout::kLaunched, 0)) {
    if (p.bytes > floor.bytes) floor = {p.bytes, absl::StrCat(p.process, ": ", p.what)};
  }
  return floor;
}

absl::Status CheckJobFitsMemory(const v1::JobConfig& job, int64_t memory_bytes) {
  const MemoryFloor floor = JobMemoryFloor(job);
  if (floor.bytes <= static_cast<double>(memory_bytes)) {
    return CheckProcessMemoryLimit(job, ProcessLayout::kLaunched);
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "the job does not fit in this machine's memory: one process needs at least ",
      GiBText(floor.bytes), " (", floor.what, "), the machine has ", GiBText(memory_bytes),
      "; shrink model.n_layers, model.d_model, model.d_ff, the batch sizes "
      "(grpo.prompts_per_step, grpo.responses_per_prompt, grpo.micro_batch_size, ...) or "
      "sampling.max_new_tokens (`trellis plan` itemizes the memory of a job that fits)"));
}

int64_t MachineMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGE_SIZE);
  // Unknown: no limit.
  if (pages <= 0 || page_size <= 0) return INT64_MAX;
  return static_cast<int64_t>(pages) * page_size;
}

}  // namespace trellis::config
