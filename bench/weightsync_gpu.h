#ifndef TRELLIS_BENCH_WEIGHTSYNC_GPU_H_
#define TRELLIS_BENCH_WEIGHTSYNC_GPU_H_

// weightsync_bench --gpu: weight sync between tensors on the GPU against
// the device-to-device copy peak (bench/README.md).

#include <cstdint>

namespace trellis::weightsync {

// Prints the table (or one line saying why it skips) and returns the exit
// code: 0 unless a transport fails.
int RunGpuBench(int reps, int64_t bucket_bytes, int64_t max_mb);

}  // namespace trellis::weightsync

#endif  // TRELLIS_BENCH_WEIGHTSYNC_GPU_H_
