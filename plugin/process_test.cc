// plugin/process.h: a program's orphans are reaped by the process that
// stands for it (SpawnOptions.reap_orphans), not left to pid 1.

#include "plugin/process.h"

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace trellis::plugin {
namespace {

// A program that exits at once, leaving a grandchild behind that, once
// orphaned, prints its parent's pid and exits 0; the program exits 3.
SpawnOptions Orphaning() {
  SpawnOptions o;
  o.argv = {"python3", "-c",
            "import os, sys, time\n"
            "if os.fork() == 0:\n"
            "    time.sleep(0.3)\n"
            "    print(os.getppid(), flush=True)\n"
            "    os._exit(0)\n"
            "os._exit(3)\n"};
  return o;
}

TEST(ChildTest, ReapOrphansAdoptsWhatTheProgramLeavesBehind) {
  SpawnOptions o = Orphaning();
  o.reap_orphans = true;
  absl::StatusOr<std::unique_ptr<Child>> child = Child::Spawn(o);
  ASSERT_TRUE(child.ok()) << child.status();
  std::string out, err;
  ASSERT_TRUE((*child)->Communicate("", absl::Now() + absl::Seconds(30), 1 << 16, &out, &err).ok());
  absl::StatusOr<int> status = (*child)->Wait(absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(Child::DescribeExit(*status), "exit status 3") << "the program's status, mirrored";
  int parent = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(out), &parent)) << out << err;
  EXPECT_EQ(parent, (*child)->pid()) << "the orphan was adopted by the process standing for it";
}

TEST(ChildTest, WithoutReapOrphansTheOrphanGoesElsewhere) {
  absl::StatusOr<std::unique_ptr<Child>> child = Child::Spawn(Orphaning());
  ASSERT_TRUE(child.ok()) << child.status();
  std::string out, err;
  ASSERT_TRUE((*child)->Communicate("", absl::Now() + absl::Seconds(30), 1 << 16, &out, &err).ok());
  int parent = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(out), &parent)) << out << err;
  EXPECT_NE(parent, (*child)->pid());
}

}  // namespace
}  // namespace trellis::plugin
