#ifndef TRELLIS_RUN_EMBEDDED_JOB_H_
#define TRELLIS_RUN_EMBEDDED_JOB_H_

// A whole job in one process: every role bound to its in-process
// implementation, weights over the in-process transport.

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "env/env.h"
#include "run/job_runner.h"
#include "trellis/v1/job.pb.h"

namespace trellis::ledger {
class Ledger;
}

namespace trellis::run {

// Called with the run's ledger once it is open, and with null before it
// goes (the dashboard attaches this way: web/watch_server.h).
using LedgerObserver = std::function<void(ledger::Ledger*)>;

// The built-in default job: GRPO on 2-digit addition, sized for a CPU
// (run/default_job.cc holds it as YAML).
[[nodiscard]] absl::StatusOr<v1::JobConfig> DefaultJob();

// Every role of `job` in this process, weights over the in-process
// transport: RunEmbeddedJob's RoleBinder (run/job_runner.h), for a caller
// that runs a job with some role wrapped (bench/long_tail_bench.cc).
[[nodiscard]] absl::StatusOr<std::unique_ptr<RoleSet>> BindLocalRoles(
    const v1::JobConfig& job, const text::Tokenizer* tokenizer, ledger::Ledger* ledger);

// Validates `job`, then runs it, writing to `out_dir`:
//   job.yaml          the job as resolved, every default filled in
//   ledger.jsonl      every ledger record (ledger/README.md)
//   summary.json      the run's summary
//   reference.safetensors, policy.safetensors   weights after warm-up / at the end
// Progress lines and the final table go to `progress`.
// With runtime.checkpoint_every > 0 it also writes out_dir/checkpoints/
// (run/checkpoint.h). `observe` may be null. The run's files and the
// ledger's clock go through `env` (RunJob). A runtime.device cuda job where
// no CUDA device is visible is refused first (model::CheckDeviceVisible);
// each role computes on the device model::RoleDevice gives it embedded.
[[nodiscard]] absl::Status RunEmbeddedJob(const v1::JobConfig& job,
                                          const std::string& out_dir,
                                          std::ostream& progress,
                                          LedgerObserver observe = nullptr,
                                          env::Env* env = env::Env::Default());

// Continues the run in `run_dir` (as RunEmbeddedJob left it, possibly
// killed) from its newest checkpoint: the job from run_dir/job.yaml; the
// learner's weights, optimizer state and version, the RNG state, the prompt
// streams' positions, the eval "before" metrics and the ledger's totals from
// the checkpoint; the reference from run_dir/reference.safetensors. Runs
// the remaining steps and the final evaluation, writing to `run_dir`.
//
// ledger.jsonl keeps its records up to the checkpoint's last step and drops
// later ones (steps a killed run did past its checkpoint, which the resumed
// run does again), so every step is counted once; new records are appended.
// A damaged or incompatible checkpoint is refused (ReadLatestCheckpoint,
// LearnerWorker::RestoreCheckpoint) before ledger.jsonl is touched where
// the damage is visible in the checkpoint's own files.
[[nodiscard]] absl::Status ResumeEmbeddedJob(const std::string& run_dir,
                                             std::ostream& progress,
                                             LedgerObserver observe = nullptr,
                                             env::Env* env = env::Env::Default());

}  // namespace trellis::run

#endif  // TRELLIS_RUN_EMBEDDED_JOB_H_
