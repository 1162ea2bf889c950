#include "env/testing/fake_env.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace trellis::env::testing {
namespace {

// How often AwaitWithDeadline looks at the fake clock while it waits on the
// caller's mutex (the fake clock cannot wake a condition on that mutex).
constexpr absl::Duration kPoll = absl::Milliseconds(1);

// Appends through another file after taking the bytes from the budget.
class BudgetedFile final : public AppendableFile {
 public:
  BudgetedFile(std::unique_ptr<AppendableFile> file, FakeEnv* env)
      : file_(std::move(file)), env_(env) {}

  absl::Status Append(std::string_view data) override {
    if (absl::Status s = env_->Reserve(file_->path(), static_cast<int64_t>(data.size()));
        !s.ok()) {
      return s;
    }
    return file_->Append(data);
  }
  absl::Status Sync() override { return file_->Sync(); }
  const std::string& path() const override { return file_->path(); }

 private:
  const std::unique_ptr<AppendableFile> file_;
  FakeEnv* const env_;
};

}  // namespace

FakeEnv::FakeEnv(Env* files) : EnvWrapper(files) {}

void FakeEnv::Advance(absl::Duration duration) {
  absl::MutexLock lock(&mu_);
  elapsed_ += duration;
}

void FakeEnv::BlockUntilWaiting(int n) {
  absl::MutexLock lock(&mu_);
  auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return waiting_ >= n; };
  mu_.Await(absl::Condition(&enough));
}

void FakeEnv::SetDiskBudget(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  budget_ = bytes;
}

int64_t FakeEnv::disk_budget() const {
  absl::MutexLock lock(&mu_);
  return budget_;
}

int64_t FakeEnv::bytes_written() const {
  absl::MutexLock lock(&mu_);
  return written_;
}

absl::Time FakeEnv::Now() {
  absl::MutexLock lock(&mu_);
  return absl::FromUnixSeconds(kStartUnixSeconds) + elapsed_;
}

double FakeEnv::MonotonicSeconds() {
  absl::MutexLock lock(&mu_);
  return absl::ToDoubleSeconds(elapsed_);
}

void FakeEnv::SleepFor(absl::Duration duration) {
  absl::MutexLock lock(&mu_);
  const absl::Duration until = elapsed_ + duration;
  auto reached = [this, until]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return elapsed_ >= until; };
  ++waiting_;
  // Advance releases mu_, which re-evaluates the condition.
  mu_.Await(absl::Condition(&reached));
  --waiting_;
}

bool FakeEnv::AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& condition,
                                absl::Time deadline) {
  CountWaiting(+1);
  bool holds = condition.Eval();
  while (!holds && Now() < deadline) holds = mu.AwaitWithTimeout(condition, kPoll);
  CountWaiting(-1);
  return holds;
}

void FakeEnv::CountWaiting(int delta) {
  absl::MutexLock lock(&mu_);
  waiting_ += delta;
}

absl::Status FakeEnv::Reserve(const std::string& path, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  if (budget_ != kUnlimited && bytes > budget_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "writing ", path, ": No space left on device (fake disk: ", budget_,
        " bytes left, the write needs ", bytes, ")"));
  }
  if (budget_ != kUnlimited) budget_ -= bytes;
  written_ += bytes;
  return absl::OkStatus();
}

absl::Status FakeEnv::WriteFileAtomically(const std::string& path, std::string_view contents) {
  if (absl::Status s = Reserve(path + ".tmp", static_cast<int64_t>(contents.size())); !s.ok()) {
    return s;
  }
  return EnvWrapper::WriteFileAtomically(path, contents);
}

absl::StatusOr<std::unique_ptr<AppendableFile>> FakeEnv::OpenAppendable(const std::string& path,
                                                                        bool truncate) {
  absl::StatusOr<std::unique_ptr<AppendableFile>> file =
      EnvWrapper::OpenAppendable(path, truncate);
  if (!file.ok()) return file.status();
  return std::make_unique<BudgetedFile>(*std::move(file), this);
}

}  // namespace trellis::env::testing
