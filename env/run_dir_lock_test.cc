#include "env/run_dir_lock.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "env/env.h"
#include "env/run_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::env {
namespace {

using ::testing::HasSubstr;

mode_t ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

// The umask is the process's: each test gets it back as it was.
class RunDirLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_umask_ = ::umask(022);
    char tmpl[] = "/tmp/run_dir_lock_testXXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override {
    ::umask(saved_umask_);
    ASSERT_TRUE(env_->RemoveAll(root_).ok());
  }

  Env* env_ = Env::Default();
  std::string root_;
  mode_t saved_umask_ = 022;
};

TEST_F(RunDirLockTest, PrivateRunsWriteOwnerOnlyDirectoriesAndFiles) {
  const std::string run = root_ + "/runs/a";
  absl::StatusOr<std::unique_ptr<RunDirLock>> lock =
      RunDirLock::Acquire(run, RunDirAccess::kPrivate);
  ASSERT_TRUE(lock.ok()) << lock.status();
  EXPECT_EQ(ModeOf(root_ + "/runs"), 0700u);
  EXPECT_EQ(ModeOf(run), 0700u);
  EXPECT_EQ(ModeOf(RunDir(run).Lock()), 0600u);
  EXPECT_EQ(*env_->ReadFile(RunDir(run).Lock()), absl::StrCat(::getpid(), "\n"));
  ASSERT_TRUE(env_->CreateDir(run + "/checkpoints/step_1").ok());
  ASSERT_TRUE(env_->WriteFileAtomically(run + "/checkpoints/step_1/state.json", "{}").ok());
  absl::StatusOr<std::unique_ptr<AppendableFile>> ledger =
      env_->OpenAppendable(RunDir(run).Ledger(), /*truncate=*/true);
  ASSERT_TRUE(ledger.ok()) << ledger.status();
  EXPECT_EQ(ModeOf(run + "/checkpoints/step_1"), 0700u);
  EXPECT_EQ(ModeOf(run + "/checkpoints/step_1/state.json"), 0600u);
  EXPECT_EQ(ModeOf(RunDir(run).Ledger()), 0600u);
}

TEST_F(RunDirLockTest, GroupRunsLetTheGroupRead) {
  const std::string run = root_ + "/run";
  absl::StatusOr<std::unique_ptr<RunDirLock>> lock = RunDirLock::Acquire(run, RunDirAccess::kGroup);
  ASSERT_TRUE(lock.ok()) << lock.status();
  ASSERT_TRUE(env_->WriteFileAtomically(RunDir(run).Summary(), "{}").ok());
  EXPECT_EQ(ModeOf(run), 0750u);
  EXPECT_EQ(ModeOf(RunDir(run).Summary()), 0640u);
}

// An older run's open directory is closed when a run takes it, and a file
// it rewrites whole gets the new modes even over a stale temporary file.
TEST_F(RunDirLockTest, TakingAnOlderRunDirectoryClosesIt) {
  const std::string run = root_ + "/old";
  ASSERT_EQ(::mkdir(run.c_str(), 0755), 0);
  const std::string stale = RunDir(run).Summary() + ".tmp";
  const int fd = ::open(stale.c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ::close(fd);
  ASSERT_EQ(ModeOf(stale), 0644u);
  absl::StatusOr<std::unique_ptr<RunDirLock>> lock =
      RunDirLock::Acquire(run, RunDirAccess::kPrivate);
  ASSERT_TRUE(lock.ok()) << lock.status();
  EXPECT_EQ(ModeOf(run), 0700u);
  ASSERT_TRUE(env_->WriteFileAtomically(RunDir(run).Summary(), "{}").ok());
  EXPECT_EQ(ModeOf(RunDir(run).Summary()), 0600u);
}

TEST_F(RunDirLockTest, OneWriterAtATimeThenTheNext) {
  const std::string run = root_ + "/run";
  absl::StatusOr<std::unique_ptr<RunDirLock>> first =
      RunDirLock::Acquire(run, RunDirAccess::kPrivate);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(env_->WriteFileAtomically(RunDir(run).Summary(), "first").ok());
  ASSERT_EQ(::chmod(run.c_str(), 0750), 0);

  // A second taker (another open file description, as another process
  // has) is refused, naming the directory and the holder, and changes
  // nothing: not the directory's mode, not the pid in the lock.
  absl::StatusOr<std::unique_ptr<RunDirLock>> second =
      RunDirLock::Acquire(run, RunDirAccess::kPrivate);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr(run + " is in use"));
  EXPECT_THAT(second.status().message(), HasSubstr(absl::StrCat("process ", ::getpid())));
  EXPECT_EQ(ModeOf(run), 0750u);
  EXPECT_EQ(*env_->ReadFile(RunDir(run).Lock()), absl::StrCat(::getpid(), "\n"));
  EXPECT_EQ(*env_->ReadFile(RunDir(run).Summary()), "first");

  first->reset();
  absl::StatusOr<std::unique_ptr<RunDirLock>> third =
      RunDirLock::Acquire(run, RunDirAccess::kPrivate);
  EXPECT_TRUE(third.ok()) << third.status();
}

}  // namespace
}  // namespace trellis::env
