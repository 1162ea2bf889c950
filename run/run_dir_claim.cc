#include "run/run_dir_claim.h"

#include "loop/recipe.h"

namespace trellis::run {

env::RunDirAccess RunDirAccessOf(const v1::JobConfig& job) {
  return job.runtime().run_dir_access() == v1::RuntimeConfig::GROUP ? env::RunDirAccess::kGroup
                                                                    : env::RunDirAccess::kPrivate;
}

void ApplyRunDirAccess(const v1::JobConfig& job) { env::SetRunDirAccess(RunDirAccessOf(job)); }

absl::StatusOr<std::unique_ptr<env::RunDirLock>> ClaimRunDir(const v1::JobConfig& job,
                                                             const std::string& out_dir) {
  v1::JobConfig prepared = job;
  if (absl::Status s = loop::PrepareJob(&prepared); !s.ok()) return s;
  return env::RunDirLock::Acquire(out_dir, RunDirAccessOf(job));
}

}  // namespace trellis::run
