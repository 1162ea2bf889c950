#include "env/confined_path.h"

#include <unistd.h>

#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::env {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class ConfinedPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) / ("confined_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "checkpoints");
  }
  fs::path root_;
};

TEST_F(ConfinedPathTest, RelativePathsInsideAreJoinedToTheRoot) {
  absl::StatusOr<std::string> p = ConfinedPath(root_.string(), "checkpoints/step_2/w.safetensors");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, (root_ / "checkpoints/step_2/w.safetensors").string());
}

TEST_F(ConfinedPathTest, AbsoluteParentAndEmptyPathsAreInvalidArguments) {
  for (const char* bad : {"/etc/passwd", "../x", "checkpoints/../../x", ""}) {
    absl::StatusOr<std::string> p = ConfinedPath(root_.string(), bad);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(p.status().message(), HasSubstr(bad)) << bad;
  }
  EXPECT_EQ(ConfinedPath("", "x").status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ConfinedPathTest, ASymlinkLeadingOutsideIsPermissionDenied) {
  fs::create_directory_symlink("/etc", root_ / "escape");
  fs::create_symlink("/etc/passwd", root_ / "passwd");
  fs::create_symlink("checkpoints", root_ / "inside");
  for (const char* bad : {"escape/passwd", "passwd", "escape"}) {
    absl::StatusOr<std::string> p = ConfinedPath(root_.string(), bad);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kPermissionDenied) << bad;
    EXPECT_THAT(p.status().message(), HasSubstr(bad));
  }
  EXPECT_TRUE(ConfinedPath(root_.string(), "inside/x").ok());
}

TEST_F(ConfinedPathTest, PathInsideGivesThePathRelativeToTheRoot) {
  absl::StatusOr<std::string> rel = PathInside(root_.string() + "/", (root_ / "a/b").string());
  ASSERT_TRUE(rel.ok()) << rel.status();
  EXPECT_EQ(*rel, "a/b");
  for (const std::string bad : {std::string("/etc/passwd"), root_.string(),
                                root_.string() + "/../x", root_.string() + "x/y"}) {
    EXPECT_EQ(PathInside(root_.string(), bad).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

}  // namespace
}  // namespace trellis::env
