#ifndef TRELLIS_TESTS_TINY_JOB_H_
#define TRELLIS_TESTS_TINY_JOB_H_

// Shared by the end-to-end tests: the default job shrunk to run in about a
// second on one thread.

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "scheduler/embedded_job.h"

namespace trellis::testing_util {

// A 1-layer d_model-32 policy, 3 SFT and 3 GRPO steps of 4 prompts x 4
// responses, 16 held-out prompts, one thread, seed 5.
inline v1::JobConfig TinyJob() {
  absl::StatusOr<v1::JobConfig> base = scheduler::DefaultJob();
  EXPECT_TRUE(base.ok()) << base.status();
  v1::JobConfig job = *base;
  auto* m = job.mutable_model();
  m->set_d_model(32);
  m->set_n_layers(1);
  m->set_n_heads(2);
  m->set_n_kv_heads(1);
  m->set_d_ff(64);
  job.mutable_data()->mutable_arithmetic()->set_num_problems(200);
  job.mutable_sft()->set_steps(3);
  job.mutable_sft()->set_batch_size(16);
  job.mutable_sft()->mutable_optimizer()->set_warmup_steps(0);
  job.mutable_grpo()->set_steps(3);
  job.mutable_grpo()->set_prompts_per_step(4);
  job.mutable_grpo()->set_responses_per_prompt(4);
  job.mutable_grpo()->set_micro_batch_size(6);
  job.mutable_eval()->set_num_prompts(16);
  job.mutable_runtime()->set_num_threads(1);
  job.mutable_runtime()->set_seed(5);
  return job;
}

inline std::string Slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace trellis::testing_util

#endif  // TRELLIS_TESTS_TINY_JOB_H_
