// Env::Default(): the POSIX clock and filesystem.

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "env/env.h"
#include "env/regular_file.h"

namespace trellis::env {
namespace {

absl::Status Errno(int error, const char* what, const std::string& path) {
  return absl::ErrnoToStatus(error, absl::StrCat(what, " ", path));
}

absl::Status FromErrorCode(const std::error_code& ec, const char* what,
                           const std::string& path) {
  return absl::ErrnoToStatus(ec.value(), absl::StrCat(what, " ", path));
}

// Writes all of `data` to `fd` (retrying short writes and EINTR).
absl::Status WriteAll(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno(errno, "writing", path);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

class PosixAppendableFile final : public AppendableFile {
 public:
  PosixAppendableFile(std::string path, int fd, off_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}
  ~PosixAppendableFile() override { ::close(fd_); }

  absl::Status Append(std::string_view data) override {
    absl::Status s = WriteAll(fd_, data, path_);
    if (!s.ok()) {
      // Take back a partial write: the file ends after the last whole one.
      if (::ftruncate(fd_, size_) != 0) {
        return absl::Status(s.code(), absl::StrCat(s.message(), "; and truncating it back to ",
                                                   size_, " bytes failed"));
      }
      return s;
    }
    size_ += static_cast<off_t>(data.size());
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    if (::fsync(fd_) != 0) return Errno(errno, "fsync", path_);
    return absl::OkStatus();
  }

  const std::string& path() const override { return path_; }

 private:
  const std::string path_;
  const int fd_;
  off_t size_;
};

class PosixSequentialFile final : public SequentialFile {
 public:
  PosixSequentialFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixSequentialFile() override { ::close(fd_); }

  absl::StatusOr<size_t> Read(char* buf, size_t n) override {
    while (true) {
      const ssize_t got = ::read(fd_, buf, n);
      if (got >= 0) return static_cast<size_t>(got);
      if (errno != EINTR) return Errno(errno, "reading", path_);
    }
  }

 private:
  const std::string path_;
  const int fd_;
};

class PosixEnv final : public Env {
 public:
  absl::Time Now() override { return absl::Now(); }

  double MonotonicSeconds() override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  void SleepFor(absl::Duration duration) override { absl::SleepFor(duration); }

  bool AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& condition,
                         absl::Time deadline) override {
    return mu.AwaitWithDeadline(condition, deadline);
  }

  absl::Status CreateDir(const std::string& path) override {
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec) return FromErrorCode(ec, "creating directory", path);
    return absl::OkStatus();
  }

  absl::Status WriteFileAtomically(const std::string& path, std::string_view contents) override {
    const std::string tmp = path + ".tmp";
    // A new file, whose mode is the umask's (env/run_dir_lock.h), never one
    // an interrupted write left with other modes.
    if (::unlink(tmp.c_str()) != 0 && errno != ENOENT) return Errno(errno, "removing", tmp);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return Errno(errno, "creating", tmp);
    absl::Status s = WriteAll(fd, contents, tmp);
    if (s.ok() && ::fsync(fd) != 0) s = Errno(errno, "fsync", tmp);
    ::close(fd);
    if (s.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
      s = Errno(errno, "renaming", absl::StrCat(tmp, " to ", path));
    }
    if (!s.ok()) ::unlink(tmp.c_str());
    return s;
  }

  absl::StatusOr<std::unique_ptr<AppendableFile>> OpenAppendable(const std::string& path,
                                                                 bool truncate) override {
    const int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (truncate ? O_TRUNC : 0);
    const int fd = ::open(path.c_str(), flags, 0644);
    if (fd < 0) return Errno(errno, "opening", path);
    const off_t size = ::lseek(fd, 0, SEEK_END);
    if (size < 0) {
      const int error = errno;
      ::close(fd);
      return Errno(error, "seeking to the end of", path);
    }
    return std::make_unique<PosixAppendableFile>(path, fd, size);
  }

  absl::StatusOr<std::unique_ptr<SequentialFile>> OpenSequential(
      const std::string& path) override {
    absl::StatusOr<int> fd = OpenRegularFile(path);
    if (!fd.ok()) return fd.status();
    return std::make_unique<PosixSequentialFile>(path, *fd);
  }

  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    absl::StatusOr<std::unique_ptr<SequentialFile>> file = OpenSequential(path);
    if (!file.ok()) return file.status();
    std::string contents;
    char buf[1 << 16];
    while (true) {
      absl::StatusOr<size_t> n = (*file)->Read(buf, sizeof(buf));
      if (!n.ok()) return n.status();
      if (*n == 0) return contents;
      contents.append(buf, *n);
    }
  }

  bool Exists(const std::string& path) override { return ::access(path.c_str(), F_OK) == 0; }

  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) override {
    std::error_code ec;
    std::vector<std::string> names;
    for (std::filesystem::directory_iterator it(path, ec), end; !ec && it != end;
         it.increment(ec)) {
      names.push_back(it->path().filename().string());
    }
    if (ec) return FromErrorCode(ec, "listing", path);
    std::sort(names.begin(), names.end());
    return names;
  }

  absl::Status RemoveAll(const std::string& path) override {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
    if (ec) return FromErrorCode(ec, "removing", path);
    return absl::OkStatus();
  }

  absl::Status Rename(const std::string& from, const std::string& to) override {
    if (std::rename(from.c_str(), to.c_str()) != 0) {
      return Errno(errno, "renaming", absl::StrCat(from, " to ", to));
    }
    return absl::OkStatus();
  }

  absl::Status Sync(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Errno(errno, "opening", path);
    const bool ok = ::fsync(fd) == 0;
    const int error = errno;
    ::close(fd);
    if (!ok) return Errno(error, "fsync", path);
    return absl::OkStatus();
  }
};

}  // namespace

Env* Env::Default() {
  static Env* const env = new PosixEnv;
  return env;
}

}  // namespace trellis::env
