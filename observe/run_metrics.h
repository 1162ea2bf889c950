#ifndef TRELLIS_OBSERVE_RUN_METRICS_H_
#define TRELLIS_OBSERVE_RUN_METRICS_H_

// A run's metric sinks, fed from its ledger (docs/observe.md): one ledger
// observer turns each record into scalars (ledger/record_scalars.h) and
// hands every point to every sink. run/job_runner.cc makes one per run, in
// the process that owns the run's ledger (the scheduler's, for a launched
// run).

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "env/env.h"
#include "ledger/ledger.h"
#include "ledger/record_scalars.h"
#include "observe/metric_sink.h"
#include "trellis/v1/job.pb.h"

namespace trellis::observe {

class RunMetrics {
 public:
  // The sinks of `job`'s run into `run_dir`: TensorBoard event files in
  // run_dir/tensorboard/ (a run resumed at step `resumed_at`, -1 for a new
  // run, starts its file there) and, with observe.mlflow.uri, an MLflow run
  // named after the job. Attached to `ledger` from now on; sinks say what
  // fails on `warnings`. REQUIRES: `ledger` and `env` outlive the result.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RunMetrics>> Start(
      const v1::JobConfig& job, const std::string& run_dir, int64_t resumed_at,
      ledger::Ledger* ledger, env::Env* env, std::ostream* warnings);

  // Any sinks, attached to `ledger`.
  RunMetrics(std::vector<std::unique_ptr<MetricSink>> sinks, ledger::Ledger* ledger, env::Env* env);
  // Finish(false) when Finish was not called.
  ~RunMetrics();
  RunMetrics(const RunMetrics&) = delete;
  RunMetrics& operator=(const RunMetrics&) = delete;

  // Detaches from the ledger and ends every sink; a run that succeeded
  // hands them summary.json's numbers (`summary_path`, read through the
  // Env) as "summary/..." at the largest step of the points before. Once.
  void Finish(bool succeeded, const std::string& summary_path = "");

 private:
  void Observe(std::string_view record);

  std::vector<std::unique_ptr<MetricSink>> sinks_;
  ledger::Ledger* const ledger_;
  env::Env* const env_;
  ledger::Ledger::ObserverId observer_;
  // Read under the ledger's lock until Finish detaches.
  ledger::RecordScalars scalars_;
  int64_t last_step_ = 0;
  bool finished_ = false;
};

}  // namespace trellis::observe

#endif  // TRELLIS_OBSERVE_RUN_METRICS_H_
