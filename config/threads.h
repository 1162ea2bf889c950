#ifndef TRELLIS_CONFIG_THREADS_H_
#define TRELLIS_CONFIG_THREADS_H_

// One thread setting for every pool of a Trellis process (docs/threads.md):
// runtime.num_threads sizes LibTorch's intra-op (OpenMP) and inter-op pools
// and OpenBLAS's own threads (model/threads.h applies it when a job
// starts), and idle pool threads sleep instead of spinning (set here, when
// the process starts). No LibTorch.

namespace trellis::config {

// The environment variable StartProcess sets (to "1") once it has put the
// process's thread environment in place.
inline constexpr char kThreadEnvMarker[] = "TRELLIS_THREAD_ENV";

// The cores this process may run on, each physical core once (SMT
// siblings in its CPU affinity count as one); at least 1.
int PhysicalCores();

// The threads runtime.num_threads stands for: itself when > 0; 0 means
// one per physical core (PhysicalCores()).
int ResolveThreads(int num_threads);

// Called first in main() of every Trellis program (the `trellis` binary,
// so every `trellis run` and `trellis serve` role process, and the tests'
// main). libgomp reads how its idle threads wait (OMP_WAIT_POLICY) once,
// when it loads, before main; by default they spin, holding cores that
// OpenBLAS and the process's other threads need (docs/threads.md: 2 threads
// ran the default job several times slower than 1). Without the marker,
// sets the marker and, unless the caller set OMP_WAIT_POLICY, sets it to
// PASSIVE and executes the same program again with the same arguments (the same
// process id), so the policy applies; returns once it does. If that
// execution fails, warns on stderr and returns: the process runs with the
// spinning default.
void StartProcess(char** argv);

}  // namespace trellis::config

#endif  // TRELLIS_CONFIG_THREADS_H_
