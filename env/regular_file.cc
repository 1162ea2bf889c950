#include "env/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"

namespace trellis::env {
namespace {

const char* TypeName(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

// Why the file open at `fd` may not be read as `path`; OK when it may.
absl::Status CheckOpened(int fd, const std::string& path, Links links) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("stat ", path));
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is ", TypeName(st.st_mode), "; expected a regular file"));
  }
  if (links == Links::kRunFile && st.st_nlink != 1) {
    return absl::PermissionDeniedError(absl::StrCat(
        path, " has ", st.st_nlink,
        " hard links; a file of the run directory must be its only link (another could be "
        "outside the run directory)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int> OpenRegularFile(const std::string& path, Links links) {
  const int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | (links == Links::kRunFile ? O_NOFOLLOW : 0);
  const int fd = ::open(path.c_str(), flags);
  if (fd < 0) {
    if (errno == ELOOP && links == Links::kRunFile) {
      return absl::PermissionDeniedError(absl::StrCat(
          path, " is a symbolic link; a file of the run directory is read only as itself"));
    }
    return absl::ErrnoToStatus(errno, absl::StrCat("opening ", path));
  }
  absl::Status s = CheckOpened(fd, path, links);
  // Reads of a regular file block as usual.
  if (s.ok() && ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
    s = absl::ErrnoToStatus(errno, absl::StrCat("opening ", path));
  }
  if (!s.ok()) {
    ::close(fd);
    return s;
  }
  return fd;
}

absl::Status CheckRegularFile(const std::string& path, Links links) {
  absl::StatusOr<int> fd = OpenRegularFile(path, links);
  if (!fd.ok()) return fd.status();
  ::close(*fd);
  return absl::OkStatus();
}

}  // namespace trellis::env
