#ifndef TRELLIS_RUN_JOB_RUNNER_H_
#define TRELLIS_RUN_JOB_RUNNER_H_

// One run of a job, whatever binds its roles: validates the job, opens the
// run directory and its ledger, loads the data, asks a RoleSet for the
// roles, runs the loop, and writes the outputs (embedded_job.h lists them).
// Embedded runs bind in-process engines; launched runs bind gRPC clients.

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "data/dataset.h"
#include "env/env.h"
#include "ledger/ledger.h"
#include "loop/roles.h"
#include "run/checkpoint.h"
#include "text/tokenizer.h"
#include "trellis/v1/job.pb.h"

namespace trellis::run {

using loop::Roles;

// The job's examples: data.train_path / eval_path, or the generated
// arithmetic task.
[[nodiscard]] absl::StatusOr<data::Split> LoadJobData(const v1::JobConfig& job);

// The roles of one run and whatever keeps them alive.
class RoleSet {
 public:
  virtual ~RoleSet() = default;
  virtual loop::Roles roles() = 0;
  // Brings the roles to the state saved in `checkpoint` (learner, RNG).
  [[nodiscard]] virtual absl::Status Restore(const Checkpoint& checkpoint) = 0;
};

using RoleBinder = std::function<absl::StatusOr<std::unique_ptr<RoleSet>>(
    const v1::JobConfig& job, const text::Tokenizer* tokenizer, ledger::Ledger* ledger)>;

// Runs `job` into `out_dir`; continues from `resume` when it is not null.
// `observe` (may be null) is called with the ledger once it is open, and
// with null before summary.json is written (or when the run fails);
// `stop_requested` (may be null) is checked before every step. The run's
// files (job.yaml, ledger.jsonl, checkpoints, summary.json) and the
// ledger's clock go through `env`; a failed ledger write (a full disk)
// stops the run before its next step with that error, naming the file.
[[nodiscard]] absl::Status RunJob(const v1::JobConfig& job, const std::string& out_dir,
                                  const Checkpoint* resume, const RoleBinder& bind,
                                  std::ostream& progress,
                                  std::function<void(ledger::Ledger*)> observe = nullptr,
                                  std::function<bool()> stop_requested = nullptr,
                                  env::Env* env = env::Env::Default());

}  // namespace trellis::run

#endif  // TRELLIS_RUN_JOB_RUNNER_H_
