#ifndef TRELLIS_PLUGIN_SANDBOX_H_
#define TRELLIS_PLUGIN_SANDBOX_H_

// Runs an untrusted program with limits.
//
// kBwrap: bubblewrap, started as an unprivileged user (nobody) so that it
//   uses an unprivileged user namespace: new user, pid, net (no network),
//   ipc, uts and mount namespaces; /usr, /lib, /lib64 and /bin bound
//   read-only and nothing else of the host; the working directory /box and
//   /tmp are private tmpfs that vanish with the run; --die-with-parent,
//   --new-session, --cap-drop ALL, and the seccomp filter of
//   plugin/confine.h given to bubblewrap as --seccomp FD.
// kRlimits (weaker, opt-in; where bubblewrap does not work): the program runs
//   as nobody (when we are root) in a private host directory, with
//   unshare(CLONE_NEWNET) and a new pid namespace when the host allows them,
//   the same seccomp filter installed directly, and Landlock (where the
//   kernel has it) confining it to reading the system directories and
//   writing its own directory; no mount or user namespace.
// Both: no descriptor but stdin, stdout and stderr; an environment of PATH,
// HOME, TMPDIR and LANG only; RLIMIT_CPU, RLIMIT_AS, RLIMIT_NPROC,
// RLIMIT_FSIZE (and no core files) set in the child before exec; its own
// process group, which the filter forbids leaving (no setsid, setpgid);
// and a wall-clock deadline after which the whole group is SIGKILLed (and
// under kBwrap the pid namespace with it).

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace trellis::plugin {

enum class SandboxMode { kBwrap, kRlimits };

// Whether the kBwrap setup works on this host (probed once, cached): OK, or
// FailedPrecondition saying why not (bubblewrap's own message).
[[nodiscard]] absl::Status BwrapStatus();
inline bool BwrapWorks() { return BwrapStatus().ok(); }

// What kRlimits cannot contain on this host, for the announcement that the
// fallback is in use.
std::string RlimitsWeaknesses();

// What a job asks for: kAuto and kBwrap need bubblewrap; kRlimits, the
// weaker fallback, is taken only when asked for by name.
enum class SandboxChoice { kAuto, kBwrap, kRlimits };

// The mode `wanted` gives here. kRlimits is announced on stderr with what
// it leaves open ("trellis: WHO: sandbox "rlimits" (opt-in, weaker than
// bubblewrap): ..."); FailedPrecondition, naming `field` and the `doc`
// that explains the fallback, when bubblewrap is needed and does not work.
[[nodiscard]] absl::StatusOr<SandboxMode> ChooseSandbox(SandboxChoice wanted,
                                                        const std::string& who,
                                                        const std::string& field,
                                                        const std::string& doc);

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
[[nodiscard]] absl::StatusOr<SandboxRun> RunSandboxed(
    SandboxMode mode, const std::string& interpreter, const std::string& program,
    const std::string& input, const SandboxLimits& limits, absl::Time deadline);

}  // namespace trellis::plugin

#endif  // TRELLIS_PLUGIN_SANDBOX_H_
