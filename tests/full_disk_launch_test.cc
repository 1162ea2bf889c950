// A full disk under a launched run: the scheduler (in this process, its
// files on the fake Env's disk) and every worker a `trellis serve` process.
// The disk fills after the first checkpoint; the run stops with an error
// naming ledger.jsonl, the file keeps only whole records, and `trellis
// launch --resume` (space again) finishes the run from the checkpoint with
// every step recorded once.

#include <sys/wait.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "config/worker_id.h"
#include "env/env.h"
#include "env/run_dir.h"
#include "env/testing/fake_env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loop/recipe.h"
#include "scheduler/distributed_job.h"
#include "tests/tiny_job.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using env::testing::FakeEnv;
using ::testing::HasSubstr;
using testing_util::Slurp;

constexpr int kLaunchSteps = 6;
constexpr int64_t kLaunchBytesLeft = 600;

// The fake Env's disk under the real clock (the scheduler's heartbeat watch
// and call deadlines run in real time, beside real worker processes); the
// disk fills once `latest` names the first checkpoint.
class RealClockFullDisk final : public env::EnvWrapper {
 public:
  explicit RealClockFullDisk(FakeEnv* disk) : EnvWrapper(disk), disk_(disk) {}

  absl::Time Now() override { return real_->Now(); }
  double MonotonicSeconds() override { return real_->MonotonicSeconds(); }
  void SleepFor(absl::Duration duration) override { real_->SleepFor(duration); }
  bool AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& condition,
                         absl::Time deadline) override {
    return real_->AwaitWithDeadline(mu, condition, deadline);
  }
  absl::Status WriteFileAtomically(const std::string& path, std::string_view contents) override {
    absl::Status s = EnvWrapper::WriteFileAtomically(path, contents);
    if (s.ok() && absl::EndsWith(path, "/checkpoints/latest")) disk_->SetDiskBudget(kLaunchBytesLeft);
    return s;
  }

 private:
  env::Env* const real_ = env::Env::Default();
  FakeEnv* const disk_;
};

TEST(FullDiskLaunchTest, TheSchedulerStopsNamingTheLedgerAndTheRunResumes) {
  const fs::path root = fs::path(::testing::TempDir()) / "full_disk_launch_test";
  fs::remove_all(root);
  fs::create_directories(root);
  const fs::path out = root / "run";
  const env::RunDir run(out.string());
  v1::JobConfig job = testing_util::TinyJob();
  job.mutable_grpo()->set_steps(kLaunchSteps);
  job.mutable_runtime()->set_checkpoint_every(2);

  FakeEnv disk;
  RealClockFullDisk env(&disk);
  scheduler::SchedulerOptions options;
  options.address_file = (root / "scheduler.addr").string();
  options.register_timeout = absl::Minutes(1);
  options.env = &env;
  std::ostringstream progress;
  absl::Status status;
  // Joined however the test ends: a failed assertion fails the test.
  std::jthread scheduler(
      [&] { status = scheduler::ServeScheduler(job, out.string(), options, progress); });
  for (int i = 0; i < 600 && !fs::exists(options.address_file); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(fs::exists(options.address_file)) << progress.str();
  const std::string address = Slurp(options.address_file);
  std::vector<pid_t> workers;
  for (v1::Role role : {v1::LEARNER, v1::REFERENCE, v1::VERIFIER, v1::ACTOR}) {
    for (int i = 0; i < loop::WorkersNeeded(job, role); ++i) {
      const std::string name = config::RoleName(role);
      // The scheduler in this process serves without a secret.
      workers.push_back(testing_util::StartTrellis(
          {"serve", name, "--scheduler", address, "--index", std::to_string(i), "--insecure"},
          root / absl::StrCat(name, "-", i, ".log")));
    }
  }
  scheduler.join();
  for (pid_t pid : workers) testing_util::Wait(pid);

  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_THAT(status.message(), HasSubstr(run.Ledger()));
  EXPECT_THAT(status.message(), HasSubstr("No space left on device"));
  EXPECT_THAT(status.message(), HasSubstr("the run stopped"));
  EXPECT_FALSE(fs::exists(run.Summary()));
  const std::string ledger = Slurp(run.Ledger());
  ASSERT_FALSE(ledger.empty());
  EXPECT_EQ(ledger.back(), '\n');
  std::istringstream lines(ledger);
  for (std::string line; std::getline(lines, line);) {
    EXPECT_FALSE(nlohmann::json::parse(line, nullptr, false).is_discarded()) << line;
  }
  EXPECT_EQ(Slurp(run.LatestCheckpoint()), "step_2\n");

  // Space again: the launched run resumes from step 2 and records every
  // step once.
  const fs::path log = root / "resume.log";
  const int resumed =
      testing_util::Wait(testing_util::StartTrellis({"launch", "--resume", out.string()}, log));
  ASSERT_TRUE(WIFEXITED(resumed) && WEXITSTATUS(resumed) == 0) << Slurp(log);
  EXPECT_EQ(testing_util::StepRewards(out).size(), static_cast<size_t>(kLaunchSteps));
  EXPECT_TRUE(fs::exists(run.Summary()));
}

}  // namespace
}  // namespace trellis
