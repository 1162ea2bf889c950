#include "model/threads.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <mutex>

namespace trellis::model {
namespace {

// OpenBLAS's thread controls, looked up in the loaded libraries (LibTorch
// links the system BLAS, which is OpenBLAS on Debian but need not be).
using SetBlasThreads = void (*)(int);
using GetBlasThreads = int (*)();
using GetBlasParallel = int (*)();

SetBlasThreads BlasSetter() {
  static const auto set =
      reinterpret_cast<SetBlasThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  return set;
}

GetBlasThreads BlasGetter() {
  static const auto get =
      reinterpret_cast<GetBlasThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  return get;
}

// openblas_get_parallel: 0 sequential, 1 its own pthreads pool, 2 OpenMP
// (LibTorch's pool).
constexpr int kOpenBlasOpenMp = 2;

bool BlasSharesOpenMpPool() {
  static const auto parallel =
      reinterpret_cast<GetBlasParallel>(dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
  return parallel != nullptr && parallel() == kOpenBlasOpenMp;
}

}  // namespace

int BlasThreadsFor(int threads) { return BlasSharesOpenMpPool() ? threads : 1; }

ThreadCounts SetThreads(int threads) {
  at::set_num_threads(threads);
  static std::once_flag inter_op;
  std::call_once(inter_op, [threads] {
    try {
      at::set_num_interop_threads(threads);
    } catch (const c10::Error&) {
      // Something ran inter-op work first; the pool keeps its size.
    }
  });
  if (SetBlasThreads set = BlasSetter(); set != nullptr) set(BlasThreadsFor(threads));
  return CurrentThreads();
}

ThreadCounts CurrentThreads() {
  ThreadCounts counts;
  counts.intra_op = at::get_num_threads();
  counts.inter_op = at::get_num_interop_threads();
  if (GetBlasThreads get = BlasGetter(); get != nullptr) counts.blas = get();
  return counts;
}

}  // namespace trellis::model
