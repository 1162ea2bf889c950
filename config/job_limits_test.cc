// Numbers a job may not hold: non-finite and absurd values, sizes beyond
// their bounds (config/internal/limits.h), jobs beyond the machine's
// memory (config/job_size.h), and empty job files.

#include <fstream>
#include <string>
#include <utility>

#include "config/job_config.h"
#include "config/job_size.h"
#include "config/testing/validate_yaml.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::config {
namespace {

using ::testing::HasSubstr;

using testing::ValidateYaml;

TEST(ValidateJob, RefusesNonFiniteAndAbsurdValuesNamingTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {"grpo: {optimizer: {lr: .inf}}", "grpo.optimizer.lr: must be in (0, 1], found inf"},
      {"grpo: {optimizer: {lr: .nan}}", "grpo.optimizer.lr: must be in (0, 1], found nan"},
      {"grpo: {optimizer: {lr: 1e30}}", "grpo.optimizer.lr: must be in (0, 1], found 1e+30"},
      {"sft: {optimizer: {eps: .inf}}", "sft.optimizer.eps: must be in (0, 1]"},
      {"grpo: {optimizer: {weight_decay: 1e20}}", "grpo.optimizer.weight_decay: must be in [0, 1]"},
      {"grpo: {optimizer: {max_grad_norm: .inf}}",
       "grpo.optimizer.max_grad_norm: must be in [0, 1e+06]"},
      {"model: {init_std: 1e20}", "model.init_std: must be in [0, 1], found 1e+20"},
      {"model: {rms_norm_eps: .inf}", "model.rms_norm_eps: must be in (0, 1]"},
      {"model: {rope_theta: .inf}", "model.rope_theta: must be > 0, found inf"},
      {"model: {rope_scaling: {type: llama3, high_freq_factor: .inf}}",
       "model.rope_scaling.high_freq_factor: must be a finite number, found inf"},
      {"grpo: {kl_coef: .inf}", "grpo.kl_coef: must be in [0, 1000], found inf"},
      {"sampling: {temperature: 1e-30}", "sampling.temperature: must be in [0.001, 100]"},
      {"sampling: {temperature: .inf}", "sampling.temperature: must be in [0.001, 100]"},
      {"sampling: {decode_token_budget: -1}",
       "sampling.decode_token_budget: must be >= 0, found -1"},
      {"verifier: {tolerance: .inf}", "verifier.tolerance: must be >= 0, found inf"},
      {"algorithm: ppo\nppo: {vf_coef: .inf}", "ppo.vf_coef: must be in [0, 1000]"},
      {"dpo: {beta: .inf}", "dpo.beta: must be in (0, 1000]"},
      {"memory: {lora: {rank: 4, alpha: .inf}}", "memory.lora.alpha: must be in (0, 10000]"},
      {"memory: {lora: {rank: 129}}",
       "memory.lora.rank: must be <= model.d_model (128), found 129"},
      {"verifier: {max_abs_reward: .inf}", "verifier.max_abs_reward: must be in (0, 1e+09]"},
      {"verifier: {reward_correct: 1e20}",
       "verifier.reward_correct: must be in [-10000, 10000], found 1e+20"},
      {"verifier: {timeout_reward: .nan}", "verifier.timeout_reward: must be in [-10000, 10000]"},
      {"runtime: {max_nonfinite_skips: 0}",
       "runtime.max_nonfinite_skips: must be in [1, 1000], found 0"},
      {"data: {train_path: a.jsonl}", "data.eval_path: must be set when data.train_path is set"},
      {"data: {columns: {prompt: \"\"}}",
       "data.columns.prompt: must be a column's name, found \"\""},
      {"data: {columns: {answer: question, prompt: question}}",
       "data.columns.answer: must be a column other than data.columns.prompt and messages, "
       "found \"question\""},
      {"data: {columns: {messages: text, prompt: text}}",
       "data.columns.messages: must be a column other than data.columns.prompt, found \"text\""},
  };
  for (const auto& [yaml, expected] : cases) {
    absl::Status s = ValidateYaml(yaml);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << yaml;
    EXPECT_THAT(s.message(), HasSubstr(expected)) << yaml;
  }
}

TEST(ValidateJob, SizesHaveUpperBounds) {
  const std::pair<const char*, const char*> cases[] = {
      {"grpo: {prompts_per_step: 2147483647}",
       "grpo.prompts_per_step: must be <= 1048576, found 2147483647"},
      {"grpo: {responses_per_prompt: 100000}", "grpo.responses_per_prompt: must be <= 1024"},
      {"grpo: {micro_batch_size: 2147483647}", "grpo.micro_batch_size: must be <= 1048576"},
      {"sft: {batch_size: 2147483647}", "sft.batch_size: must be <= 1048576"},
      {"eval: {batch_size: 2147483647}", "eval.batch_size: must be <= 1048576"},
      {"dpo: {batch_size: 2147483647}", "dpo.batch_size: must be <= 1048576"},
      {"model: {n_layers: 100000}", "model.n_layers: must be <= 1024, found 100000"},
      {"model: {d_model: 1048576, n_heads: 1024, n_kv_heads: 1024}",
       "model.d_model: must be <= 65536"},
      {"model: {d_ff: 2147483647}", "model.d_ff: must be <= 262144"},
      {"model: {vocab_size: 2147483647}", "model.vocab_size: must be <= 4194304"},
      {"model: {max_seq_len: 2147483647}", "model.max_seq_len: must be <= 1048576"},
      {"grpo: {steps: 2147483647}", "grpo.steps: must be <= 10000000"},
      {"deployment: {actor: {count: 100000}}", "deployment.actor.count: must be <= 1024"},
      {"data: {arithmetic: {num_problems: 2147483647}}",
       "data.arithmetic.num_problems: must be <= 10000000"},
  };
  for (const auto& [yaml, expected] : cases) {
    absl::Status s = ValidateYaml(yaml);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << yaml;
    EXPECT_THAT(s.message(), HasSubstr(expected)) << yaml;
  }
  // 2^31 is no int32 at all: the parser says so.
  absl::Status s = ParseJobYaml("grpo: {prompts_per_step: 2147483648}", "job.yaml").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("grpo.prompts_per_step: expected an integer in"));
}

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(CheckJobFitsMemory, TheDefaultJobFitsAndAHugeModelDoesNot) {
  v1::JobConfig job;
  EXPECT_TRUE(CheckJobFitsMemory(job, kGiB).ok()) << CheckJobFitsMemory(job, kGiB);

  // Every size within its own bound, together far beyond any machine.
  absl::StatusOr<v1::JobConfig> huge = ParseJobYaml(
      "model: {d_model: 65536, n_heads: 512, n_kv_heads: 512, d_ff: 262144, n_layers: 1024}");
  ASSERT_TRUE(huge.ok()) << huge.status();
  ASSERT_TRUE(ValidateJob(*huge).ok()) << ValidateJob(*huge);
  absl::Status s = CheckJobFitsMemory(*huge, 1024 * kGiB);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("does not fit in this machine's memory"));
  EXPECT_THAT(s.message(), HasSubstr("learner: "));
  EXPECT_THAT(s.message(), HasSubstr("the machine has 1.02e+03 GiB"));
}

TEST(CheckJobFitsMemory, ARolloutBeyondMemoryNamesTheActorsKvCache) {
  absl::StatusOr<v1::JobConfig> job = ParseJobYaml(
      "model: {max_seq_len: 65536}\nsampling: {max_new_tokens: 65000}\n"
      "grpo: {prompts_per_step: 1048576, responses_per_prompt: 1024}");
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(ValidateJob(*job).ok()) << ValidateJob(*job);
  absl::Status s = CheckJobFitsMemory(*job, 1024 * kGiB);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("actor: "));
  EXPECT_THAT(s.message(), HasSubstr("of KV cache"));
}

TEST(JobMemoryFloor, CountsWhatTheLearnerTrains) {
  v1::JobConfig full;
  v1::JobConfig lora;
  lora.mutable_memory()->mutable_lora()->set_rank(4);
  // AdamW: weights, gradients and two state tensors against weights alone.
  EXPECT_GT(JobMemoryFloor(full).bytes, JobMemoryFloor(lora).bytes);
  const double n = static_cast<double>(ParameterCount(ShapeOf(full.model(), 0)));
  EXPECT_GE(JobMemoryFloor(full).bytes, 16 * n);
}

// sampling.concurrency auto sizes a launched job's actor pool; an embedded
// run has no pool and refuses it by name.
TEST(ValidateEmbeddedJob, RefusesAutoConcurrencyNamingTheField) {
  absl::StatusOr<v1::JobConfig> job = ParseJobYaml("sampling: {concurrency: auto}");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(ValidateJob(*job).ok()) << ValidateJob(*job);
  const absl::Status s = ValidateEmbeddedJob(*job);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("sampling.concurrency: must be fixed in an embedded run"));
  EXPECT_THAT(s.message(), HasSubstr("found auto"));
  job->mutable_sampling()->set_concurrency(v1::SamplingConfig::FIXED);
  EXPECT_TRUE(ValidateEmbeddedJob(*job).ok());
}

TEST(LoadJobFile, AnEmptyJobFileIsAnErrorNamingIt) {
  const std::string path = ::testing::TempDir() + "/empty_job.yaml";
  for (const char* text : {"", "# only a comment\n\n# and another\n", "---\n"}) {
    std::ofstream(path, std::ios::trunc) << text;
    absl::Status s = LoadJobFile(path).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(s.message(), HasSubstr(path + ": the job file is empty")) << text;
  }
}

}  // namespace
}  // namespace trellis::config
