#ifndef TRELLIS_PLUGIN_PROCESS_H_
#define TRELLIS_PLUGIN_PROCESS_H_

// A child process in its own process group, talked to over pipes with
// poll() deadlines. Killing it kills the whole group (SIGKILL). The child
// inherits no descriptors but its stdin, stdout, stderr and the ones named
// in SpawnOptions::inherit_fds: every other one is closed before exec,
// close-on-exec or not.

#include <linux/filter.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace trellis::plugin {

struct SpawnOptions {
  // argv[0] is looked up in PATH.
  std::vector<std::string> argv;
  // Capture stderr (else the child inherits ours).
  bool capture_stderr = false;
  // Set in the child before exec (resource, limit).
  std::vector<std::pair<int, rlim_t>> rlimits;
  // Working directory of the child; "" keeps ours.
  std::string cwd;
  // Drop to this uid/gid (and no supplementary groups) before exec; -1 keeps.
  int uid = -1;
  int gid = -1;
  // unshare(CLONE_NEWNET) before exec when we may (best effort).
  bool unshare_net = false;
  // Run the program as the first process of a new pid namespace when we may
  // (best effort): a process outside it stands for it (its exit status is
  // the program's) and every process in it dies when the program ends or
  // is killed, and is reaped inside it.
  bool new_pid_namespace = false;
  // Start the program from a process that stands for it (its exit status
  // is the program's) and, as a child subreaper, reaps every process the
  // program leaves behind (bubblewrap's) before it ends: left to pid 1,
  // which in a container may never reap them, they stay zombies counted
  // against their user's RLIMIT_NPROC and later starts fail with EAGAIN.
  bool reap_orphans = false;
  // Descriptors the child keeps at the same numbers (close-on-exec cleared).
  std::vector<int> inherit_fds;
  // The child's whole environment ("NAME=value"); unset keeps ours.
  std::optional<std::vector<std::string>> env;
  // A Landlock ruleset (plugin/confine.h) the child restricts
  // itself to; -1 for none. The caller keeps and closes it.
  int landlock_ruleset = -1;
  // A seccomp filter installed last before exec; nullptr for none. Both
  // confinements set no_new_privs.
  const std::vector<sock_filter>* seccomp = nullptr;
};

class Child {
 public:
  // FailedPrecondition when the program cannot be started (names argv[0]).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Child>> Spawn(const SpawnOptions& options);
  ~Child();  // Kill()

  pid_t pid() const { return pid_; }

  // Writes all of `data` to the child's stdin. DeadlineExceeded; Unavailable
  // when the child closed its stdin (it exited).
  [[nodiscard]] absl::Status Write(absl::string_view data, absl::Time deadline);
  // One line from stdout, without its '\n'. DeadlineExceeded; Unavailable at
  // end of stream; ResourceExhausted when a line passes `max_bytes`.
  [[nodiscard]] absl::StatusOr<std::string> ReadLine(absl::Time deadline, size_t max_bytes);
  // Output read past the last line returned.
  bool HasBufferedOutput() const { return !out_buf_.empty(); }
  // Buffered output, or stdout readable now (more output, or its end).
  bool HasPendingOutput();

  // Feeds `input` to stdin (then closes it) while collecting stdout and
  // stderr (at most `cap` bytes each, the rest dropped) until both end.
  // DeadlineExceeded when the deadline passes first.
  [[nodiscard]] absl::Status Communicate(absl::string_view input, absl::Time deadline, size_t cap,
                                         std::string* out, std::string* err);

  // Waits for the child to exit; DeadlineExceeded if it has not by then.
  [[nodiscard]] absl::StatusOr<int> Wait(absl::Time deadline);
  // SIGKILL to the child's process group (stragglers included), then reaps
  // the child. Idempotent.
  void Kill();
  // The wait status of a reaped child, or -1.
  int wait_status() const { return wait_status_; }

  // "exit status 3", "killed by signal 9 (Killed)".
  static std::string DescribeExit(int wait_status);

 private:
  Child() = default;
  void CloseFd(int& fd);

  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  int stderr_fd_ = -1;
  bool reaped_ = false;
  int wait_status_ = -1;
  std::string out_buf_;
};

}  // namespace trellis::plugin

#endif  // TRELLIS_PLUGIN_PROCESS_H_
