#include "env/regular_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "env/env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::env {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

class RegularFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("regular_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    file_ = (dir_ / "weights.safetensors").string();
    std::ofstream(file_) << "SECRETBYTES";
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  std::string file_;
};

TEST_F(RegularFileTest, OpensARegularFileForBlockingReads) {
  absl::StatusOr<int> fd = OpenRegularFile(file_, Links::kRunFile);
  ASSERT_TRUE(fd.ok()) << fd.status();
  char buf[4];
  EXPECT_EQ(::read(*fd, buf, sizeof(buf)), 4);
  ::close(*fd);
  EXPECT_TRUE(CheckRegularFile(file_).ok());
}

// A FIFO named as a model file is refused at once: the open does not wait
// for a writer, and nothing is read from it.
TEST_F(RegularFileTest, FifoIsRefusedWithoutWaiting) {
  const std::string fifo = (dir_ / "model.safetensors").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (Links links : {Links::kFollow, Links::kRunFile}) {
    const absl::Status s = CheckRegularFile(fifo, links);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(s.message(), HasSubstr(fifo + " is a FIFO; expected a regular file"));
  }
  // Env::ReadFile (config.json, tokenizer files, checkpoints) opens the same way.
  EXPECT_EQ(Env::Default()->ReadFile(fifo).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(RegularFileTest, DirectoryAndDeviceAreRefused) {
  EXPECT_THAT(CheckRegularFile(dir_.string()).message(), HasSubstr("is a directory"));
  EXPECT_THAT(CheckRegularFile("/dev/null").message(), HasSubstr("is a character device"));
}

// A hard link made inside the run directory to a file elsewhere is not a
// file of the run: refused, and the message never shows the file's bytes.
TEST_F(RegularFileTest, RunFileWithASecondHardLinkIsRefused) {
  const std::string link = (dir_ / "reference.safetensors").string();
  ASSERT_EQ(::link(file_.c_str(), link.c_str()), 0);
  const absl::Status s = CheckRegularFile(link, Links::kRunFile);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr(link + " has 2 hard links"));
  EXPECT_THAT(s.message(), Not(HasSubstr("SECRET")));
  // A model directory's files are read wherever they are linked from.
  EXPECT_TRUE(CheckRegularFile(link, Links::kFollow).ok());
}

TEST_F(RegularFileTest, RunFileThatIsASymbolicLinkIsRefused) {
  const std::string link = (dir_ / "reference.safetensors").string();
  fs::create_symlink(file_, link);
  const absl::Status s = CheckRegularFile(link, Links::kRunFile);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("is a symbolic link"));
  EXPECT_TRUE(CheckRegularFile(link, Links::kFollow).ok());
}

TEST_F(RegularFileTest, MissingFileIsNotFoundNamingIt) {
  const absl::Status s = CheckRegularFile((dir_ / "absent").string());
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("absent"));
}

}  // namespace
}  // namespace trellis::env
