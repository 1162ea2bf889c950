#ifndef TRELLIS_ENV_RUN_DIR_LOCK_H_
#define TRELLIS_ENV_RUN_DIR_LOCK_H_

// Who may read a run directory, and one writer at a time in it.
//
// A run's files are its owner's alone by default: this process's umask is
// set so that every directory it creates is 0700 and every file 0600 (with
// group access 0750 and 0640), whatever code creates them, and the
// processes it starts inherit it. Files written whole (Env::
// WriteFileAtomically) are always created anew, so they take those modes
// even where an older copy had others.
//
// A RunDirLock is an exclusive flock(2) on RUN/lock (env::RunDir::Lock)
// held while it lives; the kernel lets it go when the process dies, however
// it dies, so a killed run can be taken again at once. Its file descriptor
// is close-on-exec: processes the holder starts do not hold it.

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace trellis::env {

enum class RunDirAccess {
  kPrivate,  // directories 0700, files 0600
  kGroup,    // directories 0750, files 0640
};

// Sets this process's umask for `access` (077 or 027): everything it and
// the processes it starts create from now on has the modes above.
void SetRunDirAccess(RunDirAccess access);

class RunDirLock {
 public:
  // Sets the umask for `access`, creates `run_dir` (and missing parents)
  // and takes its lock, then writes this process's pid into RUN/lock and
  // gives `run_dir` the mode of `access` (when this user owns it): what an
  // older run wrote there is then closed to others as well. When another
  // process holds the lock, FailedPrecondition naming the run directory and
  // that process's pid, and nothing in the directory is changed.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RunDirLock>> Acquire(
      const std::string& run_dir, RunDirAccess access);

  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

 private:
  explicit RunDirLock(int fd) : fd_(fd) {}
  const int fd_;
};

}  // namespace trellis::env

#endif  // TRELLIS_ENV_RUN_DIR_LOCK_H_
