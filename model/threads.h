#ifndef TRELLIS_MODEL_THREADS_H_
#define TRELLIS_MODEL_THREADS_H_

// Sizes every thread pool of the process from one count (config/threads.h:
// runtime.num_threads resolved): LibTorch's intra-op pool (OpenMP), its
// inter-op pool, and OpenBLAS's own threads, which do the matrix products
// and otherwise keep as many threads as the machine has cores whatever
// LibTorch is told. No LibTorch in the header.

namespace trellis::model {

struct ThreadCounts {
  int intra_op = 0;
  int inter_op = 0;
  // OpenBLAS's threads; 0 when the BLAS LibTorch loaded is not OpenBLAS.
  int blas = 0;
};

// REQUIRES: threads >= 1. The inter-op pool can be sized once per process,
// before it first runs work: the first call sizes it, later calls leave it.
ThreadCounts SetThreads(int threads);

// The pools' sizes now.
ThreadCounts CurrentThreads();

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_THREADS_H_
