#ifndef TRELLIS_BENCH_TIMING_H_
#define TRELLIS_BENCH_TIMING_H_

// What the weight-sync benchmark's modes time with.

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace trellis::bench {

using Clock = std::chrono::steady_clock;

inline double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The CPU time (user and system) this process's threads have used.
inline double CpuSeconds() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return seconds(r.ru_utime) + seconds(r.ru_stime);
}

// REQUIRES: `v` is not empty.
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace trellis::bench

#endif  // TRELLIS_BENCH_TIMING_H_
