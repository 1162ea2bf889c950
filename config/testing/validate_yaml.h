#ifndef TRELLIS_CONFIG_TESTING_VALIDATE_YAML_H_
#define TRELLIS_CONFIG_TESTING_VALIDATE_YAML_H_

// What the job tests (config/job_config_test.cc, config/job_limits_test.cc)
// share: a job file's text parsed and validated.

#include <string>

#include "absl/status/status.h"
#include "config/job_config.h"
#include "gtest/gtest.h"

namespace trellis::config::testing {

// ValidateJob on `yaml` parsed as job.yaml; a parse error fails the test.
inline absl::Status ValidateYaml(const std::string& yaml) {
  absl::StatusOr<v1::JobConfig> job = ParseJobYaml(yaml, "job.yaml");
  EXPECT_TRUE(job.ok()) << job.status();
  return job.ok() ? ValidateJob(*job) : job.status();
}

}  // namespace trellis::config::testing

#endif  // TRELLIS_CONFIG_TESTING_VALIDATE_YAML_H_
