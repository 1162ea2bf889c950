// The asynchronous pipeline's partial rollout options (job.async.
// partial_rollout, rollout_overdraw): what they need and what they are
// refused with, each error naming its field.

#include <string>
#include <utility>
#include <vector>

#include "config/job_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::config {
namespace {

using ::testing::HasSubstr;

absl::Status ValidateAsync(const std::string& yaml) {
  absl::StatusOr<v1::JobConfig> job = ParseJobYaml(yaml, "job.yaml");
  return job.ok() ? ValidateJob(*job) : job.status();
}

TEST(JobAsync, PartialRolloutValidatesWithTheAsynchronousPipeline) {
  EXPECT_TRUE(ValidateAsync("async: {enabled: true, max_staleness: 2, partial_rollout: continue}")
                  .ok());
  EXPECT_TRUE(ValidateAsync("async: {enabled: true, max_staleness: 0, partial_rollout: requeue, "
                            "rollout_overdraw: 4}")
                  .ok());
}

TEST(JobAsync, PartialRolloutIsRefusedWhereItCannotCarryGroups) {
  for (const auto& [yaml, want] : std::vector<std::pair<std::string, std::string>>{
           {"async: {partial_rollout: continue}",
            "async.partial_rollout: must be finish unless async.enabled"},
           {"async: {enabled: true, max_staleness: 1, partial_rollout: continue}",
            "async.partial_rollout: must be finish or requeue when async.max_staleness < 2"},
           {"async: {enabled: true, partial_rollout: requeue, rollout_overdraw: 5}",
            "async.rollout_overdraw: must be in [0, 4], found 5"},
           {"async: {enabled: true, max_staleness: 2, partial_rollout: continue}\n"
            "environment: {name: calc, turn_stop: '.'}",
            "async.partial_rollout: must be finish with an environment"},
           {"async: {enabled: true, partial_rollout: requeue}\n"
            "grpo: {dapo: {dynamic_sampling: true}}",
            "async.partial_rollout: must be finish with grpo.dapo.dynamic_sampling"}}) {
    const absl::Status s = ValidateAsync(yaml);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << yaml;
    EXPECT_THAT(s.message(), HasSubstr(want)) << yaml;
  }
}

}  // namespace
}  // namespace trellis::config
