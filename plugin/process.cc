#include "plugin/process.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"

namespace trellis::plugin {
namespace {

// Milliseconds left until `deadline`, for poll(); 0 when past.
int MillisLeft(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1 << 30));
}

// Closes [lo, hi]; by close_range where the kernel has it, else one by one
// up to the descriptor limit.
void CloseRange(unsigned lo, unsigned hi) {
  if (lo > hi || syscall(SYS_close_range, lo, hi, 0) == 0) return;
  struct rlimit rl {};
  const rlim_t max =
      getrlimit(RLIMIT_NOFILE, &rl) == 0 ? std::min<rlim_t>(rl.rlim_cur, 1 << 20) : 1024;
  for (rlim_t fd = lo; fd <= hi && fd < max; ++fd) close(static_cast<int>(fd));
}

// Closes every descriptor from 3 up but those in keep[0..n) (sorted here).
void CloseAllExcept(int* keep, int n) {
  for (int i = 1; i < n; ++i) {
    for (int j = i; j > 0 && keep[j - 1] > keep[j]; --j) std::swap(keep[j - 1], keep[j]);
  }
  unsigned lo = 3;
  for (int i = 0; i < n; ++i) {
    if (keep[i] < static_cast<int>(lo)) continue;
    if (keep[i] > static_cast<int>(lo)) CloseRange(lo, keep[i] - 1);
    lo = keep[i] + 1;
  }
  CloseRange(lo, ~0U);
}

constexpr int kMaxInherited = 16;

// The process that stands for `program` (the first process of a new pid
// namespace, or a program whose orphans it reaps): waits for it, and with
// `reap_all` for every other child too until none is left, then ends as
// `program` did (its exit status, or its signal).
[[noreturn]] void MirrorExit(pid_t program, int report, bool reap_all) {
  close(report);  // the parent hears from `program` alone
  for (int fd = 0; fd <= 2; ++fd) close(fd);
  int status = 0;
  for (;;) {
    int s = 0;
    const pid_t done = waitpid(reap_all ? -1 : program, &s, 0);
    if (done < 0) {
      if (errno == EINTR) continue;
      break;  // ECHILD: nothing left to wait for
    }
    if (done == program) {
      status = s;
      if (!reap_all) break;
    }
  }
  if (WIFEXITED(status)) _exit(WEXITSTATUS(status));
  struct rlimit no_core = {0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  kill(getpid(), WTERMSIG(status));
  _exit(128 + WTERMSIG(status));
}

// In the forked child: only async-signal-safe calls until exec.
[[noreturn]] void ExecChild(const SpawnOptions& o, char* const* argv, char* const* envp,
                            const sock_fprog* filter, int in, int out, int err, int report) {
  setpgid(0, 0);
  sigset_t all;
  sigemptyset(&all);
  sigprocmask(SIG_SETMASK, &all, nullptr);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGPIPE, &dfl, nullptr);
  int step = 0;
  auto fail = [&](int code) {
    int msg[2] = {step, code};
    (void)!write(report, msg, sizeof(msg));
    _exit(127);
  };
  step = 1;
  if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || (err >= 0 && dup2(err, 2) < 0)) fail(errno);
  int keep[kMaxInherited + 2];
  int n = 0;
  keep[n++] = report;
  if (o.landlock_ruleset >= 0) keep[n++] = o.landlock_ruleset;
  for (int fd : o.inherit_fds) {
    if (fcntl(fd, F_SETFD, 0) != 0) fail(errno);
    keep[n++] = fd;
  }
  CloseAllExcept(keep, n);
  step = 2;
  if (o.reap_orphans) {
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    const pid_t program = fork();
    if (program < 0) fail(errno);
    if (program > 0) MirrorExit(program, report, /*reap_all=*/true);
  }
  if (o.unshare_net) (void)unshare(CLONE_NEWNET);  // best effort
  const bool pid_namespace = o.new_pid_namespace && unshare(CLONE_NEWPID) == 0;
  if (pid_namespace) {
    const pid_t init = fork();
    if (init < 0) fail(errno);
    if (init > 0) MirrorExit(init, report, /*reap_all=*/false);
  }
  if (!o.cwd.empty() && chdir(o.cwd.c_str()) != 0) fail(errno);
  step = 3;
  for (const auto& [resource, limit] : o.rlimits) {
    struct rlimit rl = {limit, limit};
    if (setrlimit(resource, &rl) != 0) fail(errno);
  }
  step = 4;
  if (o.gid >= 0) {
    if (syscall(SYS_setgroups, 0, nullptr) != 0 || syscall(SYS_setgid, o.gid) != 0) fail(errno);
  }
  if (o.uid >= 0 && syscall(SYS_setuid, o.uid) != 0) fail(errno);
  step = 5;
  if ((o.landlock_ruleset >= 0 || filter != nullptr) && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) {
    fail(errno);
  }
  if (o.landlock_ruleset >= 0) {
    if (syscall(SYS_landlock_restrict_self, o.landlock_ruleset, 0) != 0) fail(errno);
    close(o.landlock_ruleset);
  }
  step = 6;
  if (filter != nullptr && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, filter) != 0) fail(errno);
  if (pid_namespace) {
    // The namespace (and all in it) ends with its first process; that one
    // ends with the process outside that stands for it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
  }
  step = 7;
  if (envp != nullptr) {
    execvpe(argv[0], argv, envp);
  } else {
    execvp(argv[0], argv);
  }
  fail(errno);
  _exit(127);
}

constexpr const char* kSteps[] = {"",         "redirect", "chdir", "setrlimit", "drop privileges",
                                  "landlock", "seccomp",  "exec"};

}  // namespace

absl::StatusOr<std::unique_ptr<Child>> Child::Spawn(const SpawnOptions& o) {
  if (o.argv.empty()) return absl::InvalidArgumentError("spawn: empty argv");
  if (o.inherit_fds.size() > kMaxInherited) {
    return absl::InvalidArgumentError(
        absl::StrCat("spawn: at most ", kMaxInherited, " inherited descriptors"));
  }
  std::vector<char*> argv;
  for (const std::string& a : o.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  if (o.env.has_value()) {
    for (const std::string& e : *o.env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
  }
  sock_fprog filter{};
  if (o.seccomp != nullptr) {
    filter.len = static_cast<unsigned short>(o.seccomp->size());
    filter.filter = const_cast<sock_filter*>(o.seccomp->data());
  }
  // stdin is a socket so that writing to a dead child fails with EPIPE
  // (MSG_NOSIGNAL) instead of raising SIGPIPE in the host.
  int in[2], out[2], err[2] = {-1, -1}, report[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) != 0) {
    return absl::InternalError(absl::StrCat("spawn: socketpair: ", strerror(errno)));
  }
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(report, O_CLOEXEC) != 0 ||
      (o.capture_stderr && pipe2(err, O_CLOEXEC) != 0)) {
    return absl::InternalError(absl::StrCat("spawn: pipe: ", strerror(errno)));
  }
  const pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1], report[0], report[1]}) {
      if (fd >= 0) close(fd);
    }
    return absl::UnavailableError(absl::StrCat("spawn: fork: ", strerror(e)));
  }
  if (pid == 0) {
    ExecChild(o, argv.data(), o.env.has_value() ? envp.data() : nullptr,
              o.seccomp != nullptr ? &filter : nullptr, in[1], out[1], err[1], report[1]);
  }
  setpgid(pid, pid);  // also in the child: no race either way
  close(in[1]);
  close(out[1]);
  if (err[1] >= 0) close(err[1]);
  close(report[1]);
  std::unique_ptr<Child> child(new Child());
  child->pid_ = pid;
  child->stdin_fd_ = in[0];
  child->stdout_fd_ = out[0];
  child->stderr_fd_ = err[0];
  int msg[2];
  ssize_t n;
  do {
    n = read(report[0], msg, sizeof(msg));
  } while (n < 0 && errno == EINTR);
  close(report[0]);
  if (n == sizeof(msg)) {
    child->Kill();
    return absl::FailedPreconditionError(
        absl::StrCat("cannot start \"", o.argv[0], "\": ", kSteps[msg[0]], ": ", strerror(msg[1])));
  }
  return child;
}

Child::~Child() { Kill(); }

void Child::CloseFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

absl::Status Child::Write(absl::string_view data, absl::Time deadline) {
  while (!data.empty()) {
    if (stdin_fd_ < 0) return absl::UnavailableError("stdin is closed");
    pollfd p = {stdin_fd_, POLLOUT, 0};
    const int r = poll(&p, 1, MillisLeft(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return absl::DeadlineExceededError("writing to the child's stdin");
    const ssize_t n = send(stdin_fd_, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return absl::UnavailableError(
          absl::StrCat("writing to the child's stdin: ", strerror(errno)));
    }
    data.remove_prefix(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Child::ReadLine(absl::Time deadline, size_t max_bytes) {
  while (true) {
    const size_t nl = out_buf_.find('\n');
    if (nl != std::string::npos) {
      std::string line = out_buf_.substr(0, nl);
      out_buf_.erase(0, nl + 1);
      return line;
    }
    if (out_buf_.size() > max_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat("a line longer than ", max_bytes, " bytes"));
    }
    pollfd p = {stdout_fd_, POLLIN, 0};
    const int r = poll(&p, 1, MillisLeft(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return absl::DeadlineExceededError("waiting for a line on the child's stdout");
    char buf[65536];
    const ssize_t n = read(stdout_fd_, buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return absl::UnavailableError("the child's stdout ended");
    out_buf_.append(buf, n);
  }
}

bool Child::HasPendingOutput() {
  if (!out_buf_.empty()) return true;
  pollfd p = {stdout_fd_, POLLIN, 0};
  return poll(&p, 1, 0) > 0;
}

absl::Status Child::Communicate(absl::string_view input, absl::Time deadline, size_t cap,
                                std::string* out, std::string* err) {
  if (input.empty()) CloseFd(stdin_fd_);
  bool out_open = true, err_open = stderr_fd_ >= 0;
  while (out_open || err_open) {
    pollfd p[3];
    int n = 0, in_at = -1, out_at = -1, err_at = -1;
    if (stdin_fd_ >= 0) {
      in_at = n;
      p[n++] = {stdin_fd_, POLLOUT, 0};
    }
    if (out_open) {
      out_at = n;
      p[n++] = {stdout_fd_, POLLIN, 0};
    }
    if (err_open) {
      err_at = n;
      p[n++] = {stderr_fd_, POLLIN, 0};
    }
    const int r = poll(p, n, MillisLeft(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return absl::DeadlineExceededError("waiting for the child's output");
    if (in_at >= 0 && p[in_at].revents != 0) {
      const ssize_t w = send(stdin_fd_, input.data(), input.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) input.remove_prefix(w);
      if ((w < 0 && errno != EAGAIN && errno != EINTR) || input.empty()) CloseFd(stdin_fd_);
    }
    auto drain = [&](int at, int fd, bool& open, std::string* sink) {
      if (at < 0 || p[at].revents == 0) return;
      char buf[65536];
      const ssize_t k = read(fd, buf, sizeof(buf));
      if (k < 0 && (errno == EINTR || errno == EAGAIN)) return;
      if (k <= 0) {
        open = false;
        return;
      }
      if (sink->size() < cap) sink->append(buf, std::min<size_t>(k, cap - sink->size()));
    };
    drain(out_at, stdout_fd_, out_open, out);
    drain(err_at, stderr_fd_, err_open, err);
  }
  return absl::OkStatus();
}

absl::StatusOr<int> Child::Wait(absl::Time deadline) {
  while (!reaped_) {
    // Notice the exit without reaping: while the leader is a zombie its
    // process group id cannot be reused, so stragglers in the group can be
    // killed safely before the leader is reaped.
    siginfo_t info{};
    const int r = waitid(P_PID, pid_, &info, WEXITED | WNOHANG | WNOWAIT);
    if (r == 0 && info.si_pid == pid_) {
      Kill();
      break;
    }
    if (r < 0 && errno != EINTR) {
      reaped_ = true;  // not our child any more; nothing to reap
      break;
    }
    if (absl::Now() >= deadline)
      return absl::DeadlineExceededError("waiting for the child to exit");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return wait_status_;
}

void Child::Kill() {
  if (pid_ > 0 && !reaped_) {
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
    wait_status_ = status;
  }
  CloseFd(stdin_fd_);
  CloseFd(stdout_fd_);
  CloseFd(stderr_fd_);
}

std::string Child::DescribeExit(int status) {
  if (status < 0) return "unknown exit status";
  if (WIFEXITED(status)) return absl::StrCat("exit status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)),
                        ")");
  }
  return absl::StrCat("wait status ", status);
}

}  // namespace trellis::plugin
