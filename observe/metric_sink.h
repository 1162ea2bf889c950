#ifndef TRELLIS_OBSERVE_METRIC_SINK_H_
#define TRELLIS_OBSERVE_METRIC_SINK_H_

// Where a run's scalars go besides ledger.jsonl (docs/observe.md): each
// sink takes the points run_metrics.h makes of the ledger's records.

#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "ledger/record_scalars.h"

namespace trellis::observe {

struct MetricPoint {
  int64_t step = 0;
  // When the ledger wrote the record (the run's Env clock).
  absl::Time time;
  std::vector<ledger::Scalar> scalars;
};

class MetricSink {
 public:
  virtual ~MetricSink() = default;
  // One step's or one evaluation's scalars. Called under the run's ledger
  // lock, in record order: returns soon, never waits on a network, and a
  // sink's own failure never fails the run (the sink says so once).
  virtual void Write(const MetricPoint& point) = 0;
  // The run ended: `summary` holds summary.json's numbers ("summary/...";
  // no scalars when the run failed). Sends what is pending, then returns;
  // later points are ignored.
  virtual void Finish(const MetricPoint& summary, bool succeeded) = 0;
};

}  // namespace trellis::observe

#endif  // TRELLIS_OBSERVE_METRIC_SINK_H_
