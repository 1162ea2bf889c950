#ifndef TRELLIS_SCHEDULER_EMBEDDED_JOB_H_
#define TRELLIS_SCHEDULER_EMBEDDED_JOB_H_

// A whole job in one process: every role bound to its in-process
// implementation, weights over the in-process transport.

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trellis/v1/job.pb.h"

namespace trellis::scheduler {

// The built-in default job: GRPO on 2-digit addition, sized for a CPU
// (scheduler/default_job.cc holds it as YAML).
[[nodiscard]] absl::StatusOr<v1::JobConfig> DefaultJob();

// Validates `job`, then runs it, writing to `out_dir`:
//   job.yaml          the job as resolved, every default filled in
//   ledger.jsonl      every ledger record (ledger/README.md)
//   summary.json      the run's summary
//   reference.safetensors, policy.safetensors   weights after warm-up / at the end
// Progress lines and the final table go to `progress`.
[[nodiscard]] absl::Status RunEmbeddedJob(const v1::JobConfig& job,
                                          const std::string& out_dir,
                                          std::ostream& progress);

}  // namespace trellis::scheduler

#endif  // TRELLIS_SCHEDULER_EMBEDDED_JOB_H_
