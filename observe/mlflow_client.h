#ifndef TRELLIS_OBSERVE_MLFLOW_CLIENT_H_
#define TRELLIS_OBSERVE_MLFLOW_CLIENT_H_

// The calls of MLflow's tracking REST API 2.0 a run makes
// (https://mlflow.org/docs/latest/rest-api.html): the experiment by name
// (created when missing), a run in it, batches of parameters and metrics,
// the run's end.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "observe/http_client.h"

namespace trellis::observe {

struct MlflowMetric {
  std::string key;
  double value = 0;
  int64_t timestamp_ms = 0;
  int64_t step = 0;
};

using MlflowParam = std::pair<std::string, std::string>;

class MlflowClient {
 public:
  // runs/log-batch takes at most this many metrics, and parameters.
  static constexpr size_t kMaxMetricsPerBatch = 1000;
  static constexpr size_t kMaxParamsPerBatch = 100;

  // REQUIRES: `http` outlives the client.
  explicit MlflowClient(HttpClient* http) : http_(http) {}

  // experiments/get-by-name, or experiments/create when there is none.
  [[nodiscard]] absl::StatusOr<std::string> ExperimentId(const std::string& name);
  // runs/create; the new run's id.
  [[nodiscard]] absl::StatusOr<std::string> CreateRun(const std::string& experiment_id,
                                                      const std::string& run_name,
                                                      int64_t start_time_ms);
  // runs/log-batch. REQUIRES: at most kMaxMetricsPerBatch metrics and
  // kMaxParamsPerBatch params.
  [[nodiscard]] absl::Status LogBatch(const std::string& run_id,
                                      const std::vector<MlflowMetric>& metrics,
                                      const std::vector<MlflowParam>& params);
  // runs/update: `status` FINISHED or FAILED.
  [[nodiscard]] absl::Status EndRun(const std::string& run_id, const std::string& status,
                                    int64_t end_time_ms);

 private:
  HttpClient* const http_;
};

}  // namespace trellis::observe

#endif  // TRELLIS_OBSERVE_MLFLOW_CLIENT_H_
