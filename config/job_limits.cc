// Upper bounds of sizes, the reward settings, and rules that need the
// whole job (config/internal/limits.h).

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "config/internal/limits.h"

namespace trellis::config::internal {
namespace {

void AtMost(Checker& c, const std::string& path, int64_t v, int64_t hi) {
  c.Require(v <= hi, path, absl::StrCat("<= ", hi), v);
}

void CheckModelSizes(const v1::ModelConfig& m, Checker& c) {
  AtMost(c, "model.vocab_size", m.vocab_size(), kMaxVocabSize);
  AtMost(c, "model.d_model", m.d_model(), kMaxDModel);
  AtMost(c, "model.d_ff", m.d_ff(), kMaxDff);
  AtMost(c, "model.expert_d_ff", m.expert_d_ff(), kMaxDff);
  AtMost(c, "model.num_experts", m.num_experts(), kMaxExperts);
  AtMost(c, "model.n_layers", m.n_layers(), kMaxLayers);
  AtMost(c, "model.n_heads", m.n_heads(), kMaxHeads);
  AtMost(c, "model.n_kv_heads", m.n_kv_heads(), kMaxHeads);
  AtMost(c, "model.head_dim", m.head_dim(), kMaxHeadDim);
  AtMost(c, "model.max_seq_len", m.max_seq_len(), kMaxSeqLen);
}

// A Parquet dataset's columns: named, and three different ones.
void CheckDataColumns(const v1::DataColumns& cols, Checker& c) {
  const std::pair<const char*, const std::string*> named[] = {
      {"data.columns.prompt", &cols.prompt()},
      {"data.columns.answer", &cols.answer()},
      {"data.columns.messages", &cols.messages()}};
  for (const auto& [path, name] : named) c.Require(!name->empty(), path, "a column's name", "\"\"");
  c.Require(cols.answer() != cols.prompt() && cols.answer() != cols.messages(),
            "data.columns.answer", "a column other than data.columns.prompt and messages",
            absl::StrCat("\"", cols.answer(), "\""));
  c.Require(cols.messages() != cols.prompt(), "data.columns.messages",
            "a column other than data.columns.prompt", absl::StrCat("\"", cols.messages(), "\""));
}

void CheckBatchSizes(const v1::JobConfig& job, Checker& c) {
  for (const auto& [path, rows] :
       {std::pair{"grpo.prompts_per_step", job.grpo().prompts_per_step()},
        std::pair{"grpo.micro_batch_size", job.grpo().micro_batch_size()},
        std::pair{"sft.batch_size", job.sft().batch_size()},
        std::pair{"dpo.batch_size", job.dpo().batch_size()},
        std::pair{"reward_model.batch_size", job.reward_model().batch_size()},
        std::pair{"eval.batch_size", job.eval().batch_size()}}) {
    AtMost(c, path, rows, kMaxRows);
  }
  AtMost(c, "grpo.responses_per_prompt", job.grpo().responses_per_prompt(), kMaxResponsesPerPrompt);
  AtMost(c, "dpo.responses_per_prompt", job.dpo().responses_per_prompt(), kMaxResponsesPerPrompt);
  for (const auto& [path, steps] :
       {std::pair{"grpo.steps", job.grpo().steps()}, std::pair{"sft.steps", job.sft().steps()},
        std::pair{"dpo.steps", job.dpo().steps()},
        std::pair{"reward_model.steps", job.reward_model().steps()},
        std::pair{"grpo.optimizer.warmup_steps", job.grpo().optimizer().warmup_steps()},
        std::pair{"sft.optimizer.warmup_steps", job.sft().optimizer().warmup_steps()}}) {
    AtMost(c, path, steps, kMaxSteps);
  }
  AtMost(c, "data.arithmetic.num_problems", job.data().arithmetic().num_problems(), kMaxProblems);
}

void CheckWorkers(const v1::JobConfig& job, Checker& c) {
  const v1::DeploymentConfig& d = job.deployment();
  AtMost(c, "deployment.actor.count", d.actor().count(), kMaxWorkers);
  AtMost(c, "deployment.learner.count", d.learner().count(), kMaxWorkers);
  AtMost(c, "runtime.num_threads", job.runtime().num_threads(), kMaxWorkers);
  AtMost(c, "verifier.workers", job.verifier().workers(), kMaxWorkers);
  AtMost(c, "verifier.max_processes", job.verifier().max_processes(), 1 << 16);
  const int32_t skips = job.runtime().max_nonfinite_skips();
  c.Require(skips >= 1 && skips <= kMaxNonfiniteSkips, "runtime.max_nonfinite_skips",
            absl::StrCat("in [1, ", kMaxNonfiniteSkips, "]"), skips);
}

// Every reward the verifier settings give lies within the bound rewards
// are clipped to (docs/verifier-protocol.md).
void CheckRewards(const v1::VerifierConfig& v, Checker& c) {
  c.PositiveAtMost("verifier.max_abs_reward", v.max_abs_reward(), kMaxRewardBound);
  const float bound = v.max_abs_reward();
  for (const auto& [path, reward] :
       {std::pair{"verifier.reward_correct", v.reward_correct()},
        std::pair{"verifier.reward_wrong", v.reward_wrong()},
        std::pair{"verifier.reward_unparseable", v.reward_unparseable()},
        std::pair{"verifier.timeout_reward", v.timeout_reward()}}) {
    c.Within(path, reward, -bound, bound);
  }
}

}  // namespace

void CheckLimits(const v1::JobConfig& job, Checker& c) {
  CheckModelSizes(job.model(), c);
  CheckBatchSizes(job, c);
  CheckWorkers(job, c);
  CheckRewards(job.verifier(), c);
  if (job.memory().lora().rank() > 0) {
    c.Require(job.memory().lora().rank() <= job.model().d_model(), "memory.lora.rank",
              absl::StrCat("<= model.d_model (", job.model().d_model(), ")"),
              job.memory().lora().rank());
  }
  const v1::DataConfig& data = job.data();
  c.Require(data.train_path().empty() || !data.eval_path().empty(), "data.eval_path",
            "set when data.train_path is set (held-out examples to evaluate)", "\"\"");
  CheckDataColumns(data.columns(), c);
}

}  // namespace trellis::config::internal
