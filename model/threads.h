#ifndef TRELLIS_MODEL_THREADS_H_
#define TRELLIS_MODEL_THREADS_H_

// Sizes every thread pool of the process from one count (config/threads.h:
// runtime.num_threads resolved): LibTorch's intra-op pool (OpenMP) and its
// inter-op pool get the count; OpenBLAS, which does the matrix products and
// otherwise keeps a pool of its own with a thread per core whatever
// LibTorch is told, runs them on the calling thread, one of the OpenMP
// pool's, unless it was built on OpenMP and so shares that pool
// (docs/threads.md: its own pool beside OpenMP's kept an extra core busy
// and made 2 threads slower than 1). No LibTorch in the header.

#include <map>

namespace trellis::model {

struct ThreadCounts {
  int intra_op = 0;
  int inter_op = 0;
  // OpenBLAS's threads; 0 when the BLAS LibTorch loaded is not OpenBLAS.
  int blas = 0;
  // Set where a job's threads were applied (roles::SetThreads): the count
  // the job gave (runtime.num_threads resolved) and the thread probe's
  // seconds per intra-op count tried (model/thread_probe.h; empty when it
  // gave 1). intra_op is below `given` when more threads did not pay.
  int given = 0;
  std::map<int, double> probe_seconds;
};

// OpenBLAS's threads for a process of `threads`: `threads` when the loaded
// OpenBLAS runs on OpenMP, else 1.
int BlasThreadsFor(int threads);

// REQUIRES: threads >= 1. The inter-op pool can be sized once per process,
// before it first runs work: the first call sizes it, later calls leave it.
ThreadCounts SetThreads(int threads);

// The pools' sizes now.
ThreadCounts CurrentThreads();

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_THREADS_H_
