#ifndef TRELLIS_TESTS_LAUNCH_UTIL_H_
#define TRELLIS_TESTS_LAUNCH_UTIL_H_

// Shared by the tests of `trellis launch`: the processes a launch started
// (OUT/launch/processes.tsv), and waiting on them.

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace trellis::testing_util {

inline bool ExitedOk(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

// name -> pid of every process the launcher started in its latest attempt.
inline std::map<std::string, pid_t> Processes(const std::filesystem::path& out) {
  std::map<std::string, pid_t> pids;
  std::ifstream in(out / "launch" / "processes.tsv");
  std::string name;
  pid_t pid;
  while (in >> name >> pid) pids[name] = pid;
  return pids;
}

inline void ExpectNoneLeft(const std::map<std::string, pid_t>& pids) {
  EXPECT_FALSE(pids.empty());
  for (const auto& [name, pid] : pids) {
    EXPECT_NE(::kill(pid, 0), 0) << name << " (pid " << pid << ") outlived the launcher";
  }
}

// Polls `ready` every 50 ms for up to `seconds`.
template <typename Fn>
bool WaitFor(Fn ready, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

}  // namespace trellis::testing_util

#endif  // TRELLIS_TESTS_LAUNCH_UTIL_H_
