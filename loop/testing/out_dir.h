#ifndef TRELLIS_LOOP_TESTING_OUT_DIR_H_
#define TRELLIS_LOOP_TESTING_OUT_DIR_H_

// A driver's output directory for one test: TempDir()/<suite>.<test>,
// emptied, so that the files a run writes (eval/<label>.jsonl) are the
// test's own.

#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace trellis::loop::testing {

inline std::string FreshOutDir() {
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                                    (std::string(test->test_suite_name()) + "." + test->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace trellis::loop::testing

#endif  // TRELLIS_LOOP_TESTING_OUT_DIR_H_
