// A mixture-of-experts job's validation (model.num_experts > 0): the
// experts' fields in range, LoRA on the attention projections only.

#include <string>

#include "config/job_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::config {
namespace {

using ::testing::HasSubstr;

absl::Status ValidateMoe(const std::string& yaml) {
  absl::StatusOr<v1::JobConfig> job = ParseJobYaml(yaml, "job.yaml");
  return job.ok() ? ValidateJob(*job) : job.status();
}

TEST(JobMoe, AMixtureOfExpertsValidates) {
  EXPECT_TRUE(ValidateMoe("model: {num_experts: 4, experts_per_token: 2, expert_d_ff: 64}\n"
                          "memory: {lora: {rank: 4, target_modules: [q_proj, o_proj]}}\n")
                  .ok());
}

TEST(JobMoe, ExpertsPerTokenMustFitTheExperts) {
  const absl::Status s = ValidateMoe("model: {num_experts: 4, experts_per_token: 5}\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("model.experts_per_token: must be in [1, num_experts (4)], found 5"));
  EXPECT_THAT(ValidateMoe("model: {num_experts: -1, router_aux_loss_coef: -0.5}\n").message(),
              HasSubstr("model.router_aux_loss_coef: must be >= 0"));
}

TEST(JobMoe, LoraOnTheExpertsIsRefused) {
  const absl::Status s = ValidateMoe(
      "model: {num_experts: 4}\nmemory: {lora: {rank: 4, target_modules: [q_proj, up_proj]}}\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("memory.lora.target_modules: must be attention projections "
                                     "only (q_proj, k_proj, v_proj, o_proj) when "
                                     "model.num_experts > 0 (no adapters on experts), found "
                                     "up_proj"));
  EXPECT_TRUE(
      ValidateMoe("memory: {lora: {rank: 4, target_modules: [q_proj, up_proj]}}\n").ok());
}

}  // namespace
}  // namespace trellis::config
