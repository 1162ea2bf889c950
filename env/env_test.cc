#include "env/env.h"

#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::env {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class PosixEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/env_testXXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { ASSERT_TRUE(env_->RemoveAll(dir_).ok()); }

  Env* env_ = Env::Default();
  std::string dir_;
};

TEST_F(PosixEnvTest, WritesAtomicallyReadsListsRenamesAndRemoves) {
  ASSERT_TRUE(env_->CreateDir(dir_ + "/a/b").ok());
  ASSERT_TRUE(env_->CreateDir(dir_ + "/a/b").ok());  // exists: fine
  ASSERT_TRUE(env_->WriteFileAtomically(dir_ + "/a/f.txt", "one").ok());
  ASSERT_TRUE(env_->WriteFileAtomically(dir_ + "/a/f.txt", "two").ok());
  EXPECT_EQ(*env_->ReadFile(dir_ + "/a/f.txt"), "two");
  EXPECT_FALSE(env_->Exists(dir_ + "/a/f.txt.tmp"));
  EXPECT_THAT(*env_->ListDir(dir_ + "/a"), ElementsAre("b", "f.txt"));
  ASSERT_TRUE(env_->Rename(dir_ + "/a/f.txt", dir_ + "/a/b/g.txt").ok());
  EXPECT_FALSE(env_->Exists(dir_ + "/a/f.txt"));
  EXPECT_TRUE(env_->Exists(dir_ + "/a/b/g.txt"));
  ASSERT_TRUE(env_->Sync(dir_ + "/a/b/g.txt").ok());
  ASSERT_TRUE(env_->Sync(dir_ + "/a/b").ok());
  ASSERT_TRUE(env_->RemoveAll(dir_ + "/a").ok());
  EXPECT_FALSE(env_->Exists(dir_ + "/a"));
  EXPECT_TRUE(env_->RemoveAll(dir_ + "/a").ok());  // gone already: fine
}

TEST_F(PosixEnvTest, AppendsAndTruncates) {
  const std::string path = dir_ + "/log.jsonl";
  {
    absl::StatusOr<std::unique_ptr<AppendableFile>> f = env_->OpenAppendable(path, true);
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_TRUE((*f)->Append("a\n").ok());
    ASSERT_TRUE((*f)->Append("b\n").ok());
    ASSERT_TRUE((*f)->Sync().ok());
  }
  {
    absl::StatusOr<std::unique_ptr<AppendableFile>> f = env_->OpenAppendable(path, false);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Append("c\n").ok());
  }
  EXPECT_EQ(*env_->ReadFile(path), "a\nb\nc\n");
  ASSERT_TRUE(env_->OpenAppendable(path, true).ok());
  EXPECT_EQ(*env_->ReadFile(path), "");
}

TEST_F(PosixEnvTest, ErrorsNameThePathAndFollowErrno) {
  const std::string missing = dir_ + "/no/such/file";
  absl::StatusOr<std::string> read = env_->ReadFile(missing);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(read.status().message(), HasSubstr(missing));
  absl::Status write = env_->WriteFileAtomically(missing, "x");
  EXPECT_EQ(write.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(write.message(), HasSubstr(missing + ".tmp"));
  absl::Status rename = env_->Rename(missing, dir_ + "/x");
  EXPECT_EQ(rename.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(rename.message(), HasSubstr(missing));
  EXPECT_EQ(env_->ListDir(missing).status().code(), absl::StatusCode::kNotFound);
}

TEST(PosixEnvClockTest, AwaitReturnsAtOnceWhenTheConditionHolds) {
  Env* env = Env::Default();
  absl::Mutex mu;
  bool done = true;
  const absl::Time before = absl::Now();
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(env->AwaitWithDeadline(mu, absl::Condition(&done), absl::InfiniteFuture()));
  EXPECT_GE(env->Now(), before);
}

}  // namespace
}  // namespace trellis::env
