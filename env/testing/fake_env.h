#ifndef TRELLIS_ENV_TESTING_FAKE_ENV_H_
#define TRELLIS_ENV_TESTING_FAKE_ENV_H_

// An Env for tests: the files of another Env (the real filesystem by
// default: give it a temporary directory), with
//  - a clock that moves only when the test calls Advance: SleepFor and
//    AwaitWithDeadline return when the fake time reaches their deadline
//    (or the condition holds), never after a real wait of that length;
//  - a disk with a byte budget: every byte written through this Env
//    (WriteFileAtomically, AppendableFile::Append) is taken from it, and a
//    write that does not fit fails whole with ResourceExhausted naming
//    the path, as ENOSPC would. Nothing is given back by removing files.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "env/env.h"

namespace trellis::env::testing {

class FakeEnv final : public EnvWrapper {
 public:
  // The fake clock starts here.
  static constexpr int64_t kStartUnixSeconds = 1700000000;
  // No budget: writes never run out of space.
  static constexpr int64_t kUnlimited = -1;

  // REQUIRES: `files` outlives this Env.
  explicit FakeEnv(Env* files = Env::Default());

  // Moves the fake clock forward by `duration` (>= 0), waking the waits
  // whose deadline it passes.
  void Advance(absl::Duration duration);
  // Returns once `n` threads wait in SleepFor or AwaitWithDeadline (their
  // deadlines are then fixed: a test advances past them knowingly).
  void BlockUntilWaiting(int n);

  // Bytes that writes may still take (kUnlimited: no limit).
  void SetDiskBudget(int64_t bytes);
  int64_t disk_budget() const;
  // Bytes written through this Env so far.
  int64_t bytes_written() const;

  absl::Time Now() override;
  double MonotonicSeconds() override;
  void SleepFor(absl::Duration duration) override;
  bool AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& condition,
                         absl::Time deadline) override;

  absl::Status WriteFileAtomically(const std::string& path, std::string_view contents) override;
  absl::StatusOr<std::unique_ptr<AppendableFile>> OpenAppendable(const std::string& path,
                                                                 bool truncate) override;

  // Takes `bytes` from the budget for a write to `path`; ResourceExhausted
  // (taking nothing) when they do not fit. For the files this Env opens.
  [[nodiscard]] absl::Status Reserve(const std::string& path, int64_t bytes);

 private:
  void CountWaiting(int delta);

  mutable absl::Mutex mu_;
  absl::Duration elapsed_ ABSL_GUARDED_BY(mu_);
  int64_t budget_ ABSL_GUARDED_BY(mu_) = kUnlimited;
  int64_t written_ ABSL_GUARDED_BY(mu_) = 0;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace trellis::env::testing

#endif  // TRELLIS_ENV_TESTING_FAKE_ENV_H_
