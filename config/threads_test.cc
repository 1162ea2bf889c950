#include "config/threads.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace trellis::config {
namespace {

TEST(ThreadsTest, ZeroMeansOnePerPhysicalCore) {
  EXPECT_GE(PhysicalCores(), 1);
  EXPECT_EQ(ResolveThreads(0), PhysicalCores());
  EXPECT_EQ(ResolveThreads(3), 3);
}

// The tests' main called StartProcess: the process runs with the thread
// environment every Trellis process gets.
TEST(ThreadsTest, TestProcessesStartWithPassiveOpenMpThreads) {
  ASSERT_NE(std::getenv(kThreadEnvMarker), nullptr);
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  ASSERT_NE(policy, nullptr);
  EXPECT_EQ(std::string(policy), "PASSIVE");
}

}  // namespace
}  // namespace trellis::config
