#include "config/job_size.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "config/recipe.h"

namespace trellis::config {
namespace {

constexpr double kFloat = 4;

std::string GiB(double bytes) { return absl::StrFormat("%.3g GiB", bytes / (1 << 30)); }

// The recipe's own optimizer and the rows and sequence length of its
// smallest update micro-batch.
struct Update {
  const v1::OptimizerConfig* optimizer = nullptr;
  double rows = 0, seq = 0;
};

// Samples a step rolls out (0 for a recipe that does not roll out).
double StepSamples(const v1::JobConfig& job, std::optional<Recipe> recipe) {
  if (recipe == Recipe::kOnlineDpo) {
    return static_cast<double>(job.dpo().batch_size()) * job.dpo().responses_per_prompt();
  }
  if (recipe == Recipe::kGrpo || recipe == Recipe::kPpo || recipe == Recipe::kDistill) {
    return static_cast<double>(job.grpo().prompts_per_step()) * job.grpo().responses_per_prompt();
  }
  return 0;
}

Update UpdateOf(const v1::JobConfig& job, std::optional<Recipe> recipe) {
  const double micro = job.grpo().micro_batch_size();
  // A one-token prompt and a response at its longest, or a shortest
  // supervised pair (one prompt token, one target token).
  const double rl_seq = 1.0 + job.sampling().max_new_tokens();
  switch (recipe.value_or(Recipe::kGrpo)) {
    case Recipe::kSft:
      return {&job.sft().optimizer(), std::min<double>(micro, job.sft().batch_size()), 2};
    case Recipe::kDpo:
      return {&job.dpo().optimizer(), 2 * std::min<double>(micro, job.dpo().batch_size()), 2};
    case Recipe::kOnlineDpo:
      return {&job.dpo().optimizer(), 2 * std::min<double>(micro, job.dpo().batch_size()), rl_seq};
    case Recipe::kRewardModel:
      return {&job.reward_model().optimizer(),
              2 * std::min<double>(micro, job.reward_model().batch_size()), 2};
    case Recipe::kGrpo:
    case Recipe::kPpo:
    case Recipe::kDistill: break;
  }
  return {&job.grpo().optimizer(), std::min(micro, StepSamples(job, recipe)), rl_seq};
}

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
  const ModelShape s = ShapeOf(job.model(), 0);
  const double n = static_cast<double>(ParameterCount(s));
  const std::optional<Recipe> recipe = RecipeOf(job);
  const Update update = UpdateOf(job, recipe);
  const bool lora = job.memory().lora().rank() > 0;
  // Trained with every weight: gradients and optimizer state per parameter.
  const double per_parameter =
      kFloat + (lora ? 0 : kFloat + OptimizerStateBytes(*update.optimizer, 1));
  // Each block's output (bf16: 2 B) and the log-softmax row per token.
  const double per_token = 2.0 * s.L * s.d + kFloat * s.V;
  const double learner_state = per_parameter * n;
  const double activations = update.rows * update.seq * per_token;
  MemoryFloor learner{learner_state + activations,
                      absl::StrCat("learner: ", GiB(learner_state), " of weights",
                                   lora ? "" : ", gradients and optimizer state", " (",
                                   static_cast<int64_t>(n), " parameters) + ", GiB(activations),
                                   " of activations (", update.rows, " rows x ", update.seq,
                                   " tokens x (2 B x n_layers x d_model + 4 B x vocab_size))")};
  const double samples = StepSamples(job, recipe);
  if (samples == 0) return learner;
  const int actors = std::max(1, job.deployment().actor().count());
  const double rows = std::max(1.0, samples / actors);
  const double cache = KvCacheBytes(s, rows, 1.0 + job.sampling().max_new_tokens());
  MemoryFloor actor{
      kFloat * n + cache,
      absl::StrCat("actor: ", GiB(kFloat * n), " of weights + ", GiB(cache), " of KV cache (", rows,
                   " samples x 4 B x 2 x n_layers x n_kv_heads x head size x "
                   "(1 + sampling.max_new_tokens))")};
  return actor.bytes > learner.bytes ? actor : learner;
}

absl::Status CheckJobFitsMemory(const v1::JobConfig& job, int64_t memory_bytes) {
  const MemoryFloor floor = JobMemoryFloor(job);
  if (floor.bytes <= static_cast<double>(memory_bytes)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "the job does not fit in this machine's memory: one process needs at least ",
      GiB(floor.bytes), " (", floor.what, "), the machine has ", GiB(memory_bytes),
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
