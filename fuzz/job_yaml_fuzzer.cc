// The job YAML parser (config/job_config.h): any text parses into a job or
// fails with a status; a parsed job validates or fails with a status; its
// resolved YAML parses back, to a job whose resolved YAML is the same.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "config/job_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<trellis::v1::JobConfig> job = trellis::config::ParseJobYaml(text, "fuzz.yaml");
  if (!job.ok()) return 0;
  (void)trellis::config::ValidateJob(*job);
  const std::string resolved = trellis::config::ResolvedJobYaml(*job);
  absl::StatusOr<trellis::v1::JobConfig> again =
      trellis::config::ParseJobYaml(resolved, "resolved.yaml");
  // ResolvedJobYaml promises YAML that ParseJobYaml reads back unchanged.
  if (!again.ok() || trellis::config::ResolvedJobYaml(*again) != resolved) abort();
  return 0;
}
