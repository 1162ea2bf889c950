#include "verifier/internal/sandbox.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "verifier/internal/process.h"

namespace trellis::verifier::internal {
namespace {

constexpr int kNobody = 65534;
constexpr size_t kOutputCap = 1 << 20;

std::vector<std::string> BwrapArgv(const std::string& program_path) {
  return {"bwrap", "--unshare-all", "--die-with-parent", "--new-session",
          "--ro-bind", "/usr", "/usr",
          "--ro-bind-try", "/lib", "/lib", "--ro-bind-try", "/lib64", "/lib64",
          "--ro-bind-try", "/bin", "/bin", "--ro-bind-try", "/sbin", "/sbin",
          "--proc", "/proc", "--dev", "/dev",
          "--tmpfs", "/tmp", "--tmpfs", "/box",
          "--ro-bind", program_path, "/box/candidate.py",
          "--chdir", "/box", "--setenv", "HOME", "/box"};
}

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
  if (mode == SandboxMode::kBwrap) {
    o.argv = BwrapArgv(file);
    o.argv.insert(o.argv.end(), {interpreter, "-I", "candidate.py"});
  } else {
    o.argv = {interpreter, "-I", "candidate.py"};
    o.cwd = dir.path();
    o.unshare_net = true;
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

bool BwrapWorks() {
  static const bool works = [] {
    SandboxLimits limits;
    absl::StatusOr<SandboxRun> run =
        Run(SandboxMode::kBwrap, "/usr/bin/true", "", "", limits, absl::Now() + absl::Seconds(5));
    return run.ok() && !run->timed_out && run->wait_status == 0;
  }();
  return works;
}

absl::StatusOr<SandboxRun> RunSandboxed(SandboxMode mode, const std::string& interpreter,
                                        const std::string& program, const std::string& input,
                                        const SandboxLimits& limits, absl::Time deadline) {
  return Run(mode, interpreter, program, input, limits, deadline);
}

}  // namespace trellis::verifier::internal
