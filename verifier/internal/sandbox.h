#ifndef TRELLIS_VERIFIER_INTERNAL_SANDBOX_H_
#define TRELLIS_VERIFIER_INTERNAL_SANDBOX_H_

// Runs an untrusted program with limits.
//
// kBwrap: bubblewrap, started as an unprivileged user (nobody) so that it
//   uses an unprivileged user namespace: new net (no network), pid, ipc, uts
//   and mount namespaces; /usr (and /lib, /bin, ...) bound read-only; the
//   working directory /box and /tmp are private tmpfs; --die-with-parent,
//   --new-session.
// kRlimits (weaker, where namespaces are unavailable): the program runs as
//   nobody in a private host directory, with unshare(CLONE_NEWNET) when the
//   host allows it; other writable places on the host stay writable.
// Both: RLIMIT_CPU, RLIMIT_AS, RLIMIT_NPROC, RLIMIT_FSIZE (and no core
// files) set in the child before exec, its own process group, and a wall
// clock deadline after which the whole group is SIGKILLed.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace trellis::verifier::internal {

enum class SandboxMode { kBwrap, kRlimits };

// Whether the kBwrap setup works on this host (probed once, cached).
bool BwrapWorks();

struct SandboxLimits {
  int cpu_seconds = 5;
  int64_t memory_bytes = int64_t{512} << 20;
  int max_processes = 32;
  int64_t max_file_bytes = int64_t{16} << 20;
};

struct SandboxRun {
  bool timed_out = false;
  int wait_status = -1;  // as from waitpid
  std::string out;
  std::string err;
};

// Runs `interpreter program` with `input` on stdin until `deadline`.
// An error status means the sandbox itself could not run (not the program).
[[nodiscard]] absl::StatusOr<SandboxRun> RunSandboxed(SandboxMode mode,
                                                      const std::string& interpreter,
                                                      const std::string& program,
                                                      const std::string& input,
                                                      const SandboxLimits& limits,
                                                      absl::Time deadline);

}  // namespace trellis::verifier::internal

#endif  // TRELLIS_VERIFIER_INTERNAL_SANDBOX_H_
