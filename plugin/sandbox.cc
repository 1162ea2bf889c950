#include "plugin/sandbox.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "plugin/confine.h"
#include "plugin/process.h"

namespace trellis::plugin {
namespace {

constexpr int kNobody = 65534;
constexpr size_t kOutputCap = 1 << 20;

// What the interpreter needs of the host, read-only.
constexpr const char* kSystemDirs[] = {"/usr", "/lib", "/lib64", "/bin"};

std::vector<std::string> BwrapArgv(const std::string& program_path, int seccomp_fd) {
  std::vector<std::string> argv = {"bwrap",
                                   "--unshare-user",
                                   "--unshare-pid",
                                   "--unshare-net",
                                   "--unshare-ipc",
                                   "--unshare-uts",
                                   "--unshare-cgroup-try",
                                   "--die-with-parent",
                                   "--new-session",
                                   "--cap-drop",
                                   "ALL"};
  for (const char* dir : kSystemDirs) argv.insert(argv.end(), {"--ro-bind-try", dir, dir});
  argv.insert(argv.end(), {"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/box",
                           "--ro-bind", program_path, "/box/candidate.py", "--chdir", "/box",
                           "--seccomp", std::to_string(seccomp_fd)});
  return argv;
}

std::vector<std::string> Environment(const std::string& home, const std::string& tmp) {
  return {"PATH=/usr/bin:/bin", "HOME=" + home, "TMPDIR=" + tmp, "LANG=C.UTF-8"};
}

// Closes a descriptor when the run ends.
struct FdCloser {
  int fd = -1;
  ~FdCloser() {
    if (fd >= 0) close(fd);
  }
};

// A fresh directory readable by nobody; removed by the destructor.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/trellis-sandbox-XXXXXX";
    if (mkdtemp(tmpl) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

absl::StatusOr<SandboxRun> Run(SandboxMode mode, const std::string& interpreter,
                               const std::string& program, const std::string& input,
                               const SandboxLimits& limits, absl::Time deadline) {
  TempDir dir;
  if (dir.path().empty()) return absl::InternalError("sandbox: mkdtemp under /tmp failed");
  const std::string file = dir.path() + "/candidate.py";
  {
    std::ofstream f(file, std::ios::binary);
    f << program;
    if (!f) return absl::InternalError(absl::StrCat("sandbox: cannot write ", file));
  }
  const bool root = geteuid() == 0;
  chmod(file.c_str(), 0644);
  chmod(dir.path().c_str(), 0755);
  if (root && mode == SandboxMode::kRlimits) {
    (void)!chown(dir.path().c_str(), kNobody, kNobody);  // its private working directory
  }

  SpawnOptions o;
  o.capture_stderr = true;
  FdCloser seccomp_fd, ruleset;
  if (mode == SandboxMode::kBwrap) {
    absl::StatusOr<int> fd = SeccompFilterFd();
    if (!fd.ok()) return fd.status();
    seccomp_fd.fd = *fd;
    o.inherit_fds = {*fd};
    o.argv = BwrapArgv(file, *fd);
    o.argv.insert(o.argv.end(), {interpreter, "-I", "candidate.py"});
    o.env = Environment("/box", "/tmp");
    o.reap_orphans = true;  // bubblewrap leaves processes behind
  } else {
    absl::StatusOr<const std::vector<sock_filter>*> filter = SandboxSeccompFilter();
    if (!filter.ok()) return filter.status();
    o.seccomp = *filter;
    if (LandlockAbi() > 0) {
      std::vector<std::string> read_only(std::begin(kSystemDirs), std::end(kSystemDirs));
      read_only.push_back(interpreter);
      absl::StatusOr<int> fd = LandlockRuleset(read_only, {dir.path(), "/dev/null"});
      if (!fd.ok()) return fd.status();
      ruleset.fd = *fd;
      o.landlock_ruleset = *fd;
    }
    o.argv = {interpreter, "-I", "candidate.py"};
    o.cwd = dir.path();
    o.unshare_net = true;
    o.new_pid_namespace = true;
    o.env = Environment(dir.path(), dir.path());
  }
  if (root) o.uid = o.gid = kNobody;
  o.rlimits = {{RLIMIT_CPU, static_cast<rlim_t>(limits.cpu_seconds)},
               {RLIMIT_AS, static_cast<rlim_t>(limits.memory_bytes)},
               {RLIMIT_NPROC, static_cast<rlim_t>(limits.max_processes)},
               {RLIMIT_FSIZE, static_cast<rlim_t>(limits.max_file_bytes)},
               {RLIMIT_CORE, 0}};
  absl::StatusOr<std::unique_ptr<Child>> child = Child::Spawn(o);
  if (!child.ok()) return child.status();

  SandboxRun run;
  absl::Status io = (*child)->Communicate(input, deadline, kOutputCap, &run.out, &run.err);
  if (absl::IsDeadlineExceeded(io)) {
    run.timed_out = true;
    (*child)->Kill();
  } else {
    absl::StatusOr<int> status = (*child)->Wait(deadline);
    if (!status.ok()) {
      run.timed_out = true;
      (*child)->Kill();
    }
  }
  run.wait_status = (*child)->wait_status();
  return run;
}

}  // namespace

absl::Status BwrapStatus() {
  static const absl::Status* status = [] {
    absl::StatusOr<SandboxRun> run = Run(SandboxMode::kBwrap, "/usr/bin/true", "", "",
                                         SandboxLimits(), absl::Now() + absl::Seconds(5));
    if (!run.ok()) return new absl::Status(absl::FailedPreconditionError(run.status().message()));
    if (run->timed_out) {
      return new absl::Status(absl::FailedPreconditionError("bwrap did not finish within 5 s"));
    }
    if (run->wait_status != 0) {
      const std::string err(absl::StripAsciiWhitespace(run->err));
      return new absl::Status(absl::FailedPreconditionError(
          absl::StrCat("bwrap failed (", Child::DescribeExit(run->wait_status), ")",
                       err.empty() ? "" : ": ", err.substr(0, 300))));
    }
    return new absl::Status();
  }();
  return *status;
}

std::string RlimitsWeaknesses() {
  std::string weak = "no mount or user namespace";
  if (LandlockAbi() == 0) {
    absl::StrAppend(&weak,
                    "; no Landlock in this kernel: host files are readable and "
                    "world-writable places writable");
  } else if (LandlockAbi() < 6) {
    absl::StrAppend(&weak, "; Landlock ABI ", LandlockAbi(),
                    " < 6: the program may signal "
                    "processes of its user");
  }
  if (geteuid() != 0) {
    absl::StrAppend(&weak,
                    "; the program runs as this process's user, without a pid namespace "
                    "where this user may not make one");
  }
  return weak;
}

absl::StatusOr<SandboxRun> RunSandboxed(SandboxMode mode, const std::string& interpreter,
                                        const std::string& program, const std::string& input,
                                        const SandboxLimits& limits, absl::Time deadline) {
  return Run(mode, interpreter, program, input, limits, deadline);
}

absl::StatusOr<SandboxMode> ChooseSandbox(SandboxChoice wanted, const std::string& who,
                                          const std::string& field, const std::string& doc) {
  if (wanted == SandboxChoice::kRlimits) {
    std::cerr << "trellis: " << who
              << ": sandbox \"rlimits\" (opt-in, weaker than bubblewrap): " << RlimitsWeaknesses()
              << "\n";
    return SandboxMode::kRlimits;
  }
  absl::Status bwrap = BwrapStatus();
  if (!bwrap.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(field, ": \"", wanted == SandboxChoice::kBwrap ? "bwrap" : "auto",
                     "\" needs bubblewrap, which does not work here (", bwrap.message(),
                     "); install bubblewrap and allow unprivileged user namespaces, or set ", field,
                     ": rlimits to accept the weaker fallback (", doc, ")"));
  }
  return SandboxMode::kBwrap;
}

}  // namespace trellis::plugin
