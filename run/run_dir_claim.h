#ifndef TRELLIS_RUN_RUN_DIR_CLAIM_H_
#define TRELLIS_RUN_RUN_DIR_CLAIM_H_

// A run directory's modes and its one writer, from the job's
// runtime.run_dir_access (env/run_dir_lock.h).

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "env/run_dir_lock.h"
#include "trellis/v1/job.pb.h"

namespace trellis::run {

env::RunDirAccess RunDirAccessOf(const v1::JobConfig& job);

// Sets this process's umask for the job's access: every process of a job
// that writes into its run directory calls it before its first write.
void ApplyRunDirAccess(const v1::JobConfig& job);

// Checks `job` as every command does (loop::PrepareJob: a refused job gets
// no run directory), then takes `out_dir` for this process
// (env::RunDirLock::Acquire with the job's access) while the returned lock
// lives. `trellis run`, `trellis launch` and their --resume call it before
// they write anything.
[[nodiscard]] absl::StatusOr<std::unique_ptr<env::RunDirLock>> ClaimRunDir(
    const v1::JobConfig& job, const std::string& out_dir);

}  // namespace trellis::run

#endif  // TRELLIS_RUN_RUN_DIR_CLAIM_H_
