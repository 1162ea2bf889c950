#include "config/threads.h"

#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <set>
#include <string>

namespace trellis::config {

int PhysicalCores() {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof(cpus), &cpus) != 0) {
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? static_cast<int>(online) : 1;
  }
  // A physical core is the set of logical CPUs that share it.
  std::set<std::string> cores;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &cpus)) continue;
    std::ifstream siblings("/sys/devices/system/cpu/cpu" + std::to_string(cpu) +
                           "/topology/thread_siblings_list");
    std::string list;
    if (!std::getline(siblings, list)) list = "cpu" + std::to_string(cpu);
    cores.insert(list);
  }
  return cores.empty() ? 1 : static_cast<int>(cores.size());
}

int ResolveThreads(int num_threads) { return num_threads > 0 ? num_threads : PhysicalCores(); }

void StartProcess(char** argv) {
  if (std::getenv(kThreadEnvMarker) != nullptr) return;
  setenv(kThreadEnvMarker, "1", /*overwrite=*/1);
  // The caller's own policy was read when libgomp loaded.
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/1);
  execv("/proc/self/exe", argv);
  std::cerr << "warning: could not start again with OMP_WAIT_POLICY set (" << std::strerror(errno)
            << "); idle OpenMP threads spin\n";
}

}  // namespace trellis::config
