#ifndef TRELLIS_ENV_ENV_H_
#define TRELLIS_ENV_ENV_H_

// The operating system as Trellis uses it: a clock and the file operations
// of a run directory, behind one interface so that tests can fake time and
// a disk that fills (env/testing/fake_env.h). The lowest layer: no
// LibTorch, no gRPC.
//
// Every file operation returns a Status whose message names the path and
// the step that failed; the code follows errno (ENOSPC is
// ResourceExhausted, ENOENT NotFound, ...). An Env is thread-safe.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace trellis::env {

// A file open for appending (leveldb's WritableFile). Not thread-safe.
class AppendableFile {
 public:
  virtual ~AppendableFile() = default;
  // Appends `data` whole or not at all: on failure the file is left at its
  // size before the call, so a reader never finds part of `data`.
  [[nodiscard]] virtual absl::Status Append(std::string_view data) = 0;
  // Flushes to the operating system and fsyncs.
  [[nodiscard]] virtual absl::Status Sync() = 0;
  virtual const std::string& path() const = 0;
};

// A file read from start to end.
class SequentialFile {
 public:
  virtual ~SequentialFile() = default;
  // Reads up to `n` bytes into `buf`; returns how many (0 at the end).
  [[nodiscard]] virtual absl::StatusOr<size_t> Read(char* buf, size_t n) = 0;
};

class Env {
 public:
  virtual ~Env() = default;

  // The POSIX environment: the real clock and filesystem. Never deleted.
  static Env* Default();

  // ---- Clock.
  // Wall-clock time (deadlines, heartbeats, the breaker's pause).
  virtual absl::Time Now() = 0;
  // Seconds on a monotonic clock (durations: the ledger's spans).
  virtual double MonotonicSeconds() = 0;
  // Returns after `duration` has passed on this Env's clock.
  virtual void SleepFor(absl::Duration duration) = 0;
  // REQUIRES: `mu` held. Waits, releasing `mu`, until `condition` holds or
  // this Env's clock passes `deadline`; returns whether `condition` holds.
  // `mu` is held again on return.
  virtual bool AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& condition,
                                 absl::Time deadline) = 0;

  // ---- Files.
  // Creates `path` and its missing parents; OK when it exists.
  [[nodiscard]] virtual absl::Status CreateDir(const std::string& path) = 0;
  // Writes `contents` to path.tmp (made anew, so its mode is the umask's:
  // env/run_dir_lock.h), fsyncs it and renames it over `path`: a reader
  // finds the old file or the new one, never part of either.
  [[nodiscard]] virtual absl::Status WriteFileAtomically(const std::string& path,
                                                         std::string_view contents) = 0;
  // Opens `path` for appending, created if missing; with `truncate` emptied
  // first.
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<AppendableFile>> OpenAppendable(
      const std::string& path, bool truncate) = 0;
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<SequentialFile>> OpenSequential(
      const std::string& path) = 0;
  // The whole contents of `path`.
  [[nodiscard]] virtual absl::StatusOr<std::string> ReadFile(const std::string& path) = 0;
  virtual bool Exists(const std::string& path) = 0;
  // The names (not paths) of the entries of directory `path`, sorted.
  [[nodiscard]] virtual absl::StatusOr<std::vector<std::string>> ListDir(
      const std::string& path) = 0;
  // Removes `path` and, for a directory, everything under it; OK when it
  // does not exist.
  [[nodiscard]] virtual absl::Status RemoveAll(const std::string& path) = 0;
  // rename(2): replaces `to` (for a directory, only an empty one).
  [[nodiscard]] virtual absl::Status Rename(const std::string& from, const std::string& to) = 0;
  // fsync(2) of a file or a directory (after a rename in it).
  [[nodiscard]] virtual absl::Status Sync(const std::string& path) = 0;
};

// An Env that hands every call to another (leveldb's EnvWrapper): a fake
// overrides only what it changes.
class EnvWrapper : public Env {
 public:
  // REQUIRES: `target` outlives this wrapper.
  explicit EnvWrapper(Env* target) : target_(target) {}
  Env* target() const { return target_; }

  absl::Time Now() override { return target_->Now(); }
  double MonotonicSeconds() override { return target_->MonotonicSeconds(); }
  void SleepFor(absl::Duration duration) override { target_->SleepFor(duration); }
  bool AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& condition,
                         absl::Time deadline) override {
    return target_->AwaitWithDeadline(mu, condition, deadline);
  }
  absl::Status CreateDir(const std::string& path) override { return target_->CreateDir(path); }
  absl::Status WriteFileAtomically(const std::string& path, std::string_view contents) override {
    return target_->WriteFileAtomically(path, contents);
  }
  absl::StatusOr<std::unique_ptr<AppendableFile>> OpenAppendable(const std::string& path,
                                                                 bool truncate) override {
    return target_->OpenAppendable(path, truncate);
  }
  absl::StatusOr<std::unique_ptr<SequentialFile>> OpenSequential(
      const std::string& path) override {
    return target_->OpenSequential(path);
  }
  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    return target_->ReadFile(path);
  }
  bool Exists(const std::string& path) override { return target_->Exists(path); }
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) override {
    return target_->ListDir(path);
  }
  absl::Status RemoveAll(const std::string& path) override { return target_->RemoveAll(path); }
  absl::Status Rename(const std::string& from, const std::string& to) override {
    return target_->Rename(from, to);
  }
  absl::Status Sync(const std::string& path) override { return target_->Sync(path); }

 private:
  Env* const target_;
};

}  // namespace trellis::env

#endif  // TRELLIS_ENV_ENV_H_
