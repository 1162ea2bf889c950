#ifndef TRELLIS_ENV_TESTING_CPU_CONTENTION_H_
#define TRELLIS_ENV_TESTING_CPU_CONTENTION_H_

// A loaded machine for stress tests: while a CpuContention lives, more
// threads than the machine has cores spin, so that the threads under test
// are preempted at any point, as on a machine shared with other work. A
// stress test asserts what must hold in every interleaving; it never
// depends on which one it gets. Header-only, for tests of any layer.

#include <algorithm>
#include <stop_token>
#include <thread>
#include <vector>

namespace trellis::env::testing {

class CpuContention {
 public:
  // Spins the machine's cores plus `extra` threads.
  explicit CpuContention(int extra = 2) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    for (int i = 0; i < cores + extra; ++i) {
      spinners_.emplace_back([](std::stop_token stop) {
        while (!stop.stop_requested()) {
        }
      });
    }
  }

  int threads() const { return static_cast<int>(spinners_.size()); }

 private:
  // Stopped and joined on destruction.
  std::vector<std::jthread> spinners_;
};

}  // namespace trellis::env::testing

#endif  // TRELLIS_ENV_TESTING_CPU_CONTENTION_H_
