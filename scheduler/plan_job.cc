#include "scheduler/plan_job.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "config/job_config.h"
#include "scheduler/job_runner.h"
#include "scheduler/local_roles.h"

namespace trellis::scheduler {

absl::StatusOr<ledger::PlanWorkload> JobWorkload(const v1::JobConfig& job) {
  absl::StatusOr<data::Split> split = LoadJobData(job);
  if (!split.ok()) return split.status();
  const std::unique_ptr<model::Tokenizer> tokenizer = model::NewCharTokenizer();
  ledger::PlanWorkload w;
  w.vocab_size = VocabSize(job, *tokenizer);
  std::vector<const data::Example*> examples;
  for (const data::Example& ex : split->train) examples.push_back(&ex);
  for (const data::Example& ex : split->eval) examples.push_back(&ex);
  for (const data::Example* example : examples) {
    const data::Example& ex = *example;
    absl::StatusOr<std::vector<int32_t>> prompt = tokenizer->Encode(ex.prompt);
    absl::StatusOr<std::vector<int32_t>> answer = tokenizer->Encode(ex.answer);
    if (!prompt.ok()) return prompt.status();
    if (!answer.ok()) return answer.status();
    w.prompt_tokens = std::max<int64_t>(w.prompt_tokens, 1 + prompt->size());  // + BOS
    w.answer_tokens = std::max<int64_t>(w.answer_tokens, answer->size() + 1);  // + EOS
  }
  const int64_t held_out = static_cast<int64_t>(split->eval.size());
  w.eval_prompts = job.eval().num_prompts() > 0
                       ? std::min<int64_t>(job.eval().num_prompts(), held_out)
                       : held_out;
  w.source = absl::StrCat("the job's ", examples.size(),
                          " training and held-out examples: longest prompt ", w.prompt_tokens,
                          " tokens (BOS included), longest answer ", w.answer_tokens,
                          " (EOS included)");
  return w;
}

int64_t RlSequenceLength(const v1::JobConfig& job, const ledger::PlanWorkload& workload) {
  return workload.prompt_tokens + job.sampling().max_new_tokens() - 1;
}

absl::StatusOr<ledger::Plan> PlanJob(const v1::JobConfig& job) {
  if (absl::Status s = config::ValidateJob(job); !s.ok()) return s;
  absl::StatusOr<ledger::PlanWorkload> workload = JobWorkload(job);
  if (!workload.ok()) return workload.status();
  SetThreads(job);
  const int64_t rows = job.grpo().micro_batch_size();
  const double rate = ledger::MeasureMatmulRate(rows * RlSequenceLength(job, *workload),
                                                job.model().d_model(), job.model().d_ff());
  return ledger::MakePlan(job, *workload, rate);
}

}  // namespace trellis::scheduler
