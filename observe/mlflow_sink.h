#ifndef TRELLIS_OBSERVE_MLFLOW_SINK_H_
#define TRELLIS_OBSERVE_MLFLOW_SINK_H_

// The run's scalars logged to an MLflow tracking server (job
// observe.mlflow, docs/observe.md): a run in the job's experiment, the
// job's parameters, every point's scalars as metrics at their steps, the
// summary, and FINISHED or FAILED at the end.
//
// A step never waits on the server: Write only queues the point (at most
// max_queued_metrics metrics wait; a point beyond is dropped), and a
// thread of the sink's own sends the queue in batches (runs/log-batch,
// at most 1000 metrics each). When the server is down or answers an
// error the run goes on: the sink counts what failed and what was lost,
// says so once on `warnings` (at the first failure), and tries again with
// the next point (a batch that failed is not sent again). Finish sends
// what waits and ends the MLflow run.

#include <cstdint>
#include <iostream>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "env/env.h"
#include "observe/http_client.h"
#include "observe/metric_sink.h"
#include "observe/mlflow_client.h"

namespace trellis::observe {

struct MlflowSinkOptions {
  // The server's address, for the warning.
  std::string uri;
  std::string experiment = "trellis";
  std::string run_name;
  std::vector<MlflowParam> params;
  size_t max_queued_metrics = 100000;
  std::ostream* warnings = &std::cerr;
};

class MlflowSink final : public MetricSink {
 public:
  // Starts the sending thread; nothing is sent before the first point.
  // REQUIRES: `env` (its clock stamps the run's start and end) outlives
  // the sink.
  MlflowSink(MlflowSinkOptions options, std::unique_ptr<HttpClient> http, env::Env* env);
  // Finish(failed) when Finish was not called.
  ~MlflowSink() override;
  MlflowSink(const MlflowSink&) = delete;
  MlflowSink& operator=(const MlflowSink&) = delete;

  void Write(const MetricPoint& point) override;
  void Finish(const MetricPoint& summary, bool succeeded) override;

  struct Stats {
    // HTTP requests made, and those that failed.
    int64_t requests = 0;
    int64_t failed_requests = 0;
    // Metrics the server took; metrics lost: dropped from a full queue, in
    // a batch that failed, or waiting while no run could be made.
    int64_t metrics_logged = 0;
    int64_t metrics_lost = 0;
  };
  Stats stats() const;

 private:
  void Loop();
  // On the sending thread: makes the MLflow run and logs the parameters;
  // false when the run could not be made.
  bool StartRun();
  void Send(const std::vector<MlflowMetric>& metrics);
  // Counts one request and what it lost; the first failure is reported.
  void Count(const absl::Status& s, int64_t metrics);
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const MlflowSinkOptions options_;
  const std::unique_ptr<HttpClient> http_;
  MlflowClient client_;
  env::Env* const env_;

  mutable absl::Mutex mu_;
  std::vector<MlflowMetric> queue_ ABSL_GUARDED_BY(mu_);
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool succeeded_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);

  // The sending thread's.
  std::string run_id_;
  bool reported_ = false;
  std::thread thread_;
};

}  // namespace trellis::observe

#endif  // TRELLIS_OBSERVE_MLFLOW_SINK_H_
