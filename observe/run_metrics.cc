#include "observe/run_metrics.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "config/http_uri.h"
#include "env/run_dir.h"
#include "observe/http_client.h"
#include "observe/job_params.h"
#include "observe/mlflow_sink.h"
#include "observe/tensorboard_sink.h"

namespace trellis::observe {

absl::StatusOr<std::unique_ptr<RunMetrics>> RunMetrics::Start(const v1::JobConfig& job,
                                                              const std::string& run_dir,
                                                              int64_t resumed_at,
                                                              ledger::Ledger* ledger, env::Env* env,
                                                              std::ostream* warnings) {
  std::vector<std::unique_ptr<MetricSink>> sinks;
  absl::StatusOr<std::unique_ptr<TensorBoardSink>> tensorboard = TensorBoardSink::Create(
      env, env::RunDir(run_dir).File(env::RunDir::kTensorBoard), resumed_at, warnings);
  if (!tensorboard.ok()) return tensorboard.status();
  sinks.push_back(*std::move(tensorboard));
  const v1::MlflowConfig& mlflow = job.observe().mlflow();
  if (!mlflow.uri().empty()) {
    absl::StatusOr<config::HttpUri> uri = config::ParseHttpUri(mlflow.uri());
    if (!uri.ok()) return uri.status();
    MlflowSinkOptions options;
    options.uri = uri->ToString();
    options.experiment = mlflow.experiment();
    options.run_name = job.name();
    options.params = JobParams(job);
    options.warnings = warnings;
    sinks.push_back(std::make_unique<MlflowSink>(std::move(options), NewHttpClient(*uri), env));
  }
  return std::make_unique<RunMetrics>(std::move(sinks), ledger, env);
}

RunMetrics::RunMetrics(std::vector<std::unique_ptr<MetricSink>> sinks, ledger::Ledger* ledger,
                       env::Env* env)
    : sinks_(std::move(sinks)), ledger_(ledger), env_(env) {
  observer_ = ledger_->AddRecordObserver([this](std::string_view record) { Observe(record); });
}

RunMetrics::~RunMetrics() { Finish(/*succeeded=*/false); }

void RunMetrics::Observe(std::string_view record) {
  absl::StatusOr<std::optional<ledger::ScalarPoint>> point = scalars_.Add(record);
  // A record that does not parse is the ledger's bug, not the run's: skipped.
  if (!point.ok() || !point->has_value()) return;
  last_step_ = std::max(last_step_, (*point)->step);
  const MetricPoint metric{(*point)->step, env_->Now(), std::move((*point)->scalars)};
  for (const auto& sink : sinks_) sink->Write(metric);
}

void RunMetrics::Finish(bool succeeded, const std::string& summary_path) {
  if (finished_) return;
  finished_ = true;
  ledger_->RemoveRecordObserver(observer_);
  MetricPoint summary{last_step_, env_->Now(), {}};
  if (succeeded) {
    absl::StatusOr<std::string> text = env_->ReadFile(summary_path);
    const nlohmann::json j =
        text.ok() ? nlohmann::json::parse(*text, nullptr, false) : nlohmann::json();
    if (j.is_object()) ledger::AppendScalars(j, "summary/", &summary.scalars);
  }
  for (const auto& sink : sinks_) sink->Finish(summary, succeeded);
}

}  // namespace trellis::observe
