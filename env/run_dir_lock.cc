#include "env/run_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "env/env.h"
#include "env/run_dir.h"

namespace trellis::env {
namespace {

mode_t Umask(RunDirAccess access) { return access == RunDirAccess::kGroup ? 027 : 077; }

// "process <pid>" as the lock file `fd` names it, or "another process"
// while its holder has not written its pid yet.
std::string Holder(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  int64_t pid = 0;
  if (n > 0 && absl::SimpleAtoi(absl::StripAsciiWhitespace(buf), &pid)) {
    return absl::StrCat("process ", pid);
  }
  return "another process";
}

}  // namespace

void SetRunDirAccess(RunDirAccess access) { ::umask(Umask(access)); }

absl::StatusOr<std::unique_ptr<RunDirLock>> RunDirLock::Acquire(const std::string& run_dir,
                                                                RunDirAccess access) {
  SetRunDirAccess(access);
  if (absl::Status s = Env::Default()->CreateDir(run_dir); !s.ok()) return s;
  const std::string path = RunDir(run_dir).Lock();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("opening ", path));
  std::unique_ptr<RunDirLock> lock(new RunDirLock(fd));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return absl::ErrnoToStatus(errno, absl::StrCat("locking ", path));
    return absl::FailedPreconditionError(absl::StrCat(
        run_dir, " is in use: ", Holder(fd), " holds its lock (", path,
        "); a run directory has one writer at a time: wait for that process to end or stop "
        "it, then try again"));
  }
  const std::string pid = absl::StrCat(::getpid(), "\n");
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    return absl::ErrnoToStatus(errno, absl::StrCat("writing this process's pid to ", path));
  }
  struct stat st;
  if (::stat(run_dir.c_str(), &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("stat ", run_dir));
  }
  if (st.st_uid == ::geteuid() && ::chmod(run_dir.c_str(), 0777 & ~Umask(access)) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("setting the mode of ", run_dir));
  }
  return lock;
}

RunDirLock::~RunDirLock() { ::close(fd_); }

}  // namespace trellis::env
