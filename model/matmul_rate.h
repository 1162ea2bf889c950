#ifndef TRELLIS_MODEL_MATMUL_RATE_H_
#define TRELLIS_MODEL_MATMUL_RATE_H_

// How fast this machine multiplies matrices with the process's current
// threads (model/threads.h): the roofline `trellis plan` and `compare`
// price work against, and the peak each run records in its ledger so that
// every stage's rate reads as a share of it. No LibTorch in the header.

#include <cstdint>
#include <functional>

namespace trellis::model {

// The shortest of `reps` timed calls of `f`, after one untimed warm-up
// call: on a shared machine the fastest call is the one that had the core
// to itself. Never below 1 ns.
double BestSeconds(const std::function<void()>& f, int reps);

// FLOP/s of a float32 [m, k] x [k, n] matrix product: the best of a few
// timed repetitions (~5e7 FLOP each).
double MeasureMatmulRate(int64_t m, int64_t k, int64_t n);

// The machine's matrix-product peak: MeasureMatmulRate of a square
// product large enough for the BLAS to reach its rate (kPeakMatmulSize),
// in well under half a second.
inline constexpr int64_t kPeakMatmulSize = 384;
double MeasureMatmulPeak();

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_MATMUL_RATE_H_
