#ifndef TRELLIS_TESTS_JOB_SHAPES_H_
#define TRELLIS_TESTS_JOB_SHAPES_H_

// Small jobs shared by the tests and the benchmarks (no GoogleTest here).

#include <vector>

#include "absl/status/statusor.h"
#include "run/embedded_job.h"

namespace trellis::testing_util {

// A 1-layer d_model-32 policy, 3 SFT and 3 GRPO steps of 4 prompts x 4
// responses, 16 held-out prompts, one thread, seed 5: the default job
// shrunk to run in about a second.
inline absl::StatusOr<v1::JobConfig> TinyJobConfig() {
  absl::StatusOr<v1::JobConfig> job = run::DefaultJob();
  if (!job.ok()) return job;
  auto* m = job->mutable_model();
  m->set_d_model(32);
  m->set_n_layers(1);
  m->set_n_heads(2);
  m->set_n_kv_heads(1);
  m->set_d_ff(64);
  job->mutable_data()->mutable_arithmetic()->set_num_problems(200);
  job->mutable_sft()->set_steps(3);
  job->mutable_sft()->set_batch_size(16);
  job->mutable_sft()->mutable_optimizer()->set_warmup_steps(0);
  job->mutable_grpo()->set_steps(3);
  job->mutable_grpo()->set_prompts_per_step(4);
  job->mutable_grpo()->set_responses_per_prompt(4);
  job->mutable_grpo()->set_micro_batch_size(6);
  job->mutable_eval()->set_num_prompts(16);
  job->mutable_runtime()->set_num_threads(1);
  job->mutable_runtime()->set_seed(5);
  return job;
}

// Three variations of `tiny` that differ in micro-batch, sequence length and
// model size: the planner's checks (tests/measure_test.cc,
// bench/plan_bench.cc).
inline std::vector<v1::JobConfig> PlannerJobs(const v1::JobConfig& tiny) {
  v1::JobConfig a = tiny;
  a.mutable_model()->set_d_model(64);
  a.mutable_model()->set_n_layers(2);
  a.mutable_model()->set_n_heads(4);
  a.mutable_model()->set_n_kv_heads(2);
  a.mutable_model()->set_d_ff(128);
  a.mutable_grpo()->set_micro_batch_size(8);
  v1::JobConfig b = a;
  b.mutable_grpo()->set_micro_batch_size(16);
  b.mutable_sampling()->set_max_new_tokens(10);
  v1::JobConfig c = a;
  c.mutable_model()->set_d_model(128);
  c.mutable_model()->set_d_ff(320);
  c.mutable_model()->set_n_layers(3);
  return {a, b, c};
}

}  // namespace trellis::testing_util

#endif  // TRELLIS_TESTS_JOB_SHAPES_H_
