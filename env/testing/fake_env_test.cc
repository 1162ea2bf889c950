#include "env/testing/fake_env.h"

#include <cstdlib>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::env::testing {
namespace {

using ::testing::HasSubstr;

class FakeEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fake_env_testXXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { ASSERT_TRUE(env_.RemoveAll(dir_).ok()); }

  FakeEnv env_;
  std::string dir_;
};

TEST_F(FakeEnvTest, TimeMovesOnlyWhenAdvanced) {
  const absl::Time t0 = env_.Now();
  EXPECT_EQ(t0, absl::FromUnixSeconds(FakeEnv::kStartUnixSeconds));
  EXPECT_EQ(env_.MonotonicSeconds(), 0);
  env_.Advance(absl::Milliseconds(1500));
  EXPECT_EQ(env_.Now(), t0 + absl::Milliseconds(1500));
  EXPECT_DOUBLE_EQ(env_.MonotonicSeconds(), 1.5);
}

TEST_F(FakeEnvTest, SleepReturnsWhenTheFakeTimePassesIt) {
  absl::Notification woke;
  std::thread sleeper([&] {
    env_.SleepFor(absl::Hours(1));
    woke.Notify();
  });
  env_.BlockUntilWaiting(1);
  env_.Advance(absl::Minutes(59));
  EXPECT_FALSE(woke.WaitForNotificationWithTimeout(absl::Milliseconds(20)));
  env_.Advance(absl::Minutes(1));
  woke.WaitForNotification();
  sleeper.join();
}

TEST_F(FakeEnvTest, AwaitEndsAtTheFakeDeadlineOrWhenTheConditionHolds) {
  absl::Mutex mu;
  bool ready = false;
  const absl::Time deadline = env_.Now() + absl::Hours(24);
  bool got = true;
  absl::Notification done;
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    got = env_.AwaitWithDeadline(mu, absl::Condition(&ready), deadline);
    done.Notify();
  });
  env_.BlockUntilWaiting(1);
  env_.Advance(absl::Hours(23));
  EXPECT_FALSE(done.WaitForNotificationWithTimeout(absl::Milliseconds(20)));
  env_.Advance(absl::Hours(1));
  done.WaitForNotification();
  waiter.join();
  EXPECT_FALSE(got);

  std::thread setter([&] {
    absl::MutexLock lock(&mu);
    ready = true;
  });
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(env_.AwaitWithDeadline(mu, absl::Condition(&ready), absl::InfiniteFuture()));
  setter.join();
}

TEST_F(FakeEnvTest, AFullDiskRefusesWholeWritesNamingThePath) {
  const std::string log = dir_ + "/ledger.jsonl";
  absl::StatusOr<std::unique_ptr<AppendableFile>> f = env_.OpenAppendable(log, true);
  ASSERT_TRUE(f.ok()) << f.status();
  env_.SetDiskBudget(10);
  ASSERT_TRUE((*f)->Append("1234567\n").ok());
  EXPECT_EQ(env_.disk_budget(), 2);
  absl::Status full = (*f)->Append("abcdef\n");
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.message(), HasSubstr(log));
  EXPECT_THAT(full.message(), HasSubstr("No space left on device"));
  EXPECT_EQ(*env_.ReadFile(log), "1234567\n");  // nothing of the refused line

  absl::Status atomic = env_.WriteFileAtomically(dir_ + "/summary.json", "{}\n");
  EXPECT_EQ(atomic.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(atomic.message(), HasSubstr(dir_ + "/summary.json.tmp"));
  EXPECT_FALSE(env_.Exists(dir_ + "/summary.json"));
  ASSERT_TRUE(env_.WriteFileAtomically(dir_ + "/x", "ab").ok());
  EXPECT_EQ(env_.disk_budget(), 0);
  EXPECT_EQ(env_.bytes_written(), 10);

  env_.SetDiskBudget(FakeEnv::kUnlimited);
  EXPECT_TRUE((*f)->Append("abcdef\n").ok());
}

}  // namespace
}  // namespace trellis::env::testing
