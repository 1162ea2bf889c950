#include "config/job_config.h"
#include "run/embedded_job.h"

namespace trellis::run {
namespace {

// The built-in job: what `trellis run` does with no job file. Fields not
// named here keep their job.proto defaults. Sized for 2 CPU cores: the SFT
// warm-up runs until the policy solves 30% of a training batch (teacher-
// forced), so GRPO starts from the same competence whatever the seed, and
// 300 GRPO steps then raise greedy held-out accuracy (docs/jobs.md, "The
// default job": why these numbers, and what five seeds measured).
constexpr char kDefaultJobYaml[] = R"yaml(
name: grpo-arithmetic
data:
  arithmetic: {min_digits: 1, max_digits: 2, operators: "+", num_problems: 8000}
sft:
  steps: 800
  batch_size: 256
  target_accuracy: 0.3
  optimizer: {lr: 0.003, warmup_steps: 20}
grpo:
  steps: 300
  prompts_per_step: 64
  responses_per_prompt: 8
  optimizer: {lr: 0.0002, warmup_steps: 10}
runtime:
  num_threads: 1
deployment:
  actor: {count: 2}
)yaml";

}  // namespace

absl::StatusOr<v1::JobConfig> DefaultJob() {
  return config::ParseJobYaml(kDefaultJobYaml, "<built-in default job>");
}

}  // namespace trellis::run
