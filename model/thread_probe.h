#ifndef TRELLIS_MODEL_THREAD_PROBE_H_
#define TRELLIS_MODEL_THREAD_PROBE_H_

// runtime.num_threads is the most threads a process may compute on; how
// many of them pay for splitting one operation depends on the machine and
// the model. On a machine whose two vCPUs multiply matrices no faster than
// one, and for a model whose operations are small, a second intra-op thread
// only adds the wait for it at the end of every parallel region
// (docs/threads.md: 1.34x the wall time of 1 thread on the default job). So
// a process given N > 1 threads times one training pass (forward and
// backward) of a model of the job's shape with N, N/2, ..., 1 intra-op
// threads and keeps the fewest that run within kProbeMargin of the fastest:
// N threads are then never slower than fewer. The threads it does not use
// stay the inter-op pool's. No LibTorch in the header.

#include <cstdint>
#include <map>

#include "trellis/v1/job.pb.h"

namespace trellis::model {

// A count is kept over fewer threads only when it is this much faster.
inline constexpr double kProbeMargin = 0.05;

struct ThreadProbe {
  // The intra-op count the probe left in place.
  int intra_op = 1;
  // Seconds of the timed pass per intra-op count tried: the fastest of a
  // few rounds, each round timing every count once.
  std::map<int, double> seconds;
};

// The fewest threads whose seconds are within `margin` of the fastest's.
// REQUIRES: `seconds` not empty, every value > 0.
int FewestThreadsWithin(const std::map<int, double>& seconds, double margin);

// Times the pass for `threads`, threads / 2, ..., 1 intra-op threads on one
// block of a model of `config`'s shape and a head of at most 4096 tokens
// (256 token positions, fewer for a large block; weights drawn from a generator of its own: the
// run's random draws do not move) and sets the
// intra-op pool, and OpenBLAS as model::SetThreads does, to the count
// FewestThreadsWithin(kProbeMargin) picks. REQUIRES: threads >= 1 and
// config validated; with threads 1 nothing is timed.
ThreadProbe ProbeIntraOpThreads(const v1::ModelConfig& config, int threads);

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_THREAD_PROBE_H_
