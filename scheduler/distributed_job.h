#ifndef TRELLIS_SCHEDULER_DISTRIBUTED_JOB_H_
#define TRELLIS_SCHEDULER_DISTRIBUTED_JOB_H_

// The scheduler process of a launched job (`trellis serve scheduler`):
// serves trellis.v1.Scheduler, waits for a job (given, or submitted), for
// its workers to register, then runs the same loop as an embedded run with
// every role bound to a gRPC client. Workers are watched by heartbeat; a
// dead actor's prompts go to the live ones.

#include <optional>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "env/env.h"
#include "trellis/v1/job.pb.h"

namespace trellis::scheduler {

struct SchedulerOptions {
  // host:port; port 0 picks a free one.
  std::string listen = "127.0.0.1:0";
  // The host workers dial (rpc::Server::Start): empty, the listen host.
  std::string advertise;
  // When set, the address workers dial is written there (atomically) once
  // serving.
  std::string address_file;
  // When set, host:port of the dashboard and Prometheus /metrics (port 0
  // picks a free one); the bound address goes to OUT/http.addr.
  std::string http;
  // How long workers have to register once the job is known.
  absl::Duration register_timeout = absl::Minutes(5);
  // The run's files and the registry's clock (RunJob, WorkerRegistry).
  env::Env* env = env::Env::Default();
};

// Runs `job` (or the first one submitted, when it is empty) into `out_dir`
// (the job's runtime.out_dir when empty), writing there, besides what an
// embedded run writes, workers.tsv (id, address, pid of every worker) once
// every worker serves. Returns the job's result.
[[nodiscard]] absl::Status ServeScheduler(std::optional<v1::JobConfig> job,
                                          const std::string& out_dir,
                                          const SchedulerOptions& options,
                                          std::ostream& progress);

// Continues the launched run in `run_dir` from its newest checkpoint, as
// ResumeEmbeddedJob does for embedded runs: the job from run_dir/job.yaml,
// the learner's weights, optimizer state and version restored in the
// learner process (which reads the run directory), the loop's counters,
// data positions and ledger totals from the checkpoint. Nothing else in
// the workers draws random numbers (actors sample with per-request seeds),
// so the resumed run equals a straight one.
[[nodiscard]] absl::Status ResumeScheduler(const std::string& run_dir,
                                           const SchedulerOptions& options,
                                           std::ostream& progress);

}  // namespace trellis::scheduler

#endif  // TRELLIS_SCHEDULER_DISTRIBUTED_JOB_H_
