#include "observe/mlflow_sink.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace trellis::observe {
namespace {

int64_t Ms(absl::Time time) { return absl::ToUnixMillis(time); }

void Append(const MetricPoint& point, std::vector<MlflowMetric>* out) {
  for (const ledger::Scalar& s : point.scalars) {
    out->push_back({s.tag, s.value, Ms(point.time), point.step});
  }
}

}  // namespace

MlflowSink::MlflowSink(MlflowSinkOptions options, std::unique_ptr<HttpClient> http, env::Env* env)
    : options_(std::move(options)), http_(std::move(http)), client_(http_.get()), env_(env) {
  thread_ = std::thread([this] { Loop(); });
}

MlflowSink::~MlflowSink() { Finish({}, /*succeeded=*/false); }

void MlflowSink::Write(const MetricPoint& point) {
  absl::MutexLock lock(&mu_);
  if (finishing_) return;
  if (queue_.size() + point.scalars.size() > options_.max_queued_metrics) {
    stats_.metrics_lost += static_cast<int64_t>(point.scalars.size());
    return;
  }
  Append(point, &queue_);
}

void MlflowSink::Finish(const MetricPoint& summary, bool succeeded) {
  {
    absl::MutexLock lock(&mu_);
    if (finishing_) return;
    Append(summary, &queue_);
    finishing_ = true;
    succeeded_ = succeeded;
  }
  thread_.join();
}

MlflowSink::Stats MlflowSink::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

bool MlflowSink::HasWork() const { return !queue_.empty() || finishing_; }

void MlflowSink::Count(const absl::Status& s, int64_t metrics) {
  {
    absl::MutexLock lock(&mu_);
    ++stats_.requests;
    if (s.ok()) {
      stats_.metrics_logged += metrics;
      return;
    }
    ++stats_.failed_requests;
    stats_.metrics_lost += metrics;
  }
  if (reported_) return;
  reported_ = true;
  *options_.warnings << "mlflow: " << options_.uri << ": " << s.message()
                     << "; the run goes on, and what is not logged there is counted, not retried"
                     << std::endl;
}

bool MlflowSink::StartRun() {
  absl::StatusOr<std::string> experiment = client_.ExperimentId(options_.experiment);
  Count(experiment.status(), 0);
  if (!experiment.ok()) return false;
  absl::StatusOr<std::string> run =
      client_.CreateRun(*experiment, options_.run_name, Ms(env_->Now()));
  Count(run.status(), 0);
  if (!run.ok()) return false;
  run_id_ = *run;
  const std::vector<MlflowParam>& params = options_.params;
  for (size_t i = 0; i < params.size(); i += MlflowClient::kMaxParamsPerBatch) {
    const size_t end = std::min(params.size(), i + MlflowClient::kMaxParamsPerBatch);
    Count(client_.LogBatch(run_id_, {}, {params.begin() + i, params.begin() + end}), 0);
  }
  return true;
}

void MlflowSink::Send(const std::vector<MlflowMetric>& metrics) {
  for (size_t i = 0; i < metrics.size(); i += MlflowClient::kMaxMetricsPerBatch) {
    const size_t end = std::min(metrics.size(), i + MlflowClient::kMaxMetricsPerBatch);
    Count(client_.LogBatch(run_id_, {metrics.begin() + i, metrics.begin() + end}, {}),
          static_cast<int64_t>(end - i));
  }
}

void MlflowSink::Loop() {
  for (;;) {
    std::vector<MlflowMetric> metrics;
    bool finishing = false, succeeded = false;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &MlflowSink::HasWork));
      metrics.swap(queue_);
      finishing = finishing_;
      succeeded = succeeded_;
    }
    if (run_id_.empty() && !StartRun()) {
      absl::MutexLock lock(&mu_);
      stats_.metrics_lost += static_cast<int64_t>(metrics.size());
    } else {
      Send(metrics);
    }
    if (!finishing) continue;
    if (!run_id_.empty()) {
      Count(client_.EndRun(run_id_, succeeded ? "FINISHED" : "FAILED", Ms(env_->Now())), 0);
    }
    return;
  }
}

}  // namespace trellis::observe
