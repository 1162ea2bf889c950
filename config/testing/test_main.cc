// The main of every test binary: a test process gets the thread environment
// every Trellis process has (config/threads.h), then runs its tests.
#include <gtest/gtest.h>

#include "config/threads.h"

int main(int argc, char** argv) {
  trellis::config::StartProcess(argv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
