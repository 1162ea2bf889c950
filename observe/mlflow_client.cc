#include "observe/mlflow_client.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace trellis::observe {
namespace {

using nlohmann::json;

constexpr char kApi[] = "/api/2.0/mlflow/";

// Bytes that are not UTF-8 (a parameter's value) written as U+FFFD.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// The string at `pointer` in the JSON `body`; Internal naming the call when
// it is not there.
absl::StatusOr<std::string> Field(const absl::StatusOr<std::string>& body, const char* call,
                                  const char* pointer) {
  if (!body.ok()) return body.status();
  const json j = json::parse(*body, nullptr, /*allow_exceptions=*/false);
  const json::json_pointer at(pointer);
  if (j.is_discarded() || !j.contains(at) || !j[at].is_string()) {
    return absl::InternalError(absl::StrCat(call, ": expected a string at ", pointer,
                                            " in the answer, found: ", body->substr(0, 200)));
  }
  return j[at].get<std::string>();
}

}  // namespace

absl::StatusOr<std::string> MlflowClient::ExperimentId(const std::string& name) {
  absl::StatusOr<std::string> found =
      http_->Get(absl::StrCat(kApi, "experiments/get-by-name"), {{"experiment_name", name}});
  if (found.status().code() != absl::StatusCode::kNotFound) {
    return Field(found, "experiments/get-by-name", "/experiment/experiment_id");
  }
  return Field(http_->Post(absl::StrCat(kApi, "experiments/create"), Dump(json{{"name", name}})),
               "experiments/create", "/experiment_id");
}

absl::StatusOr<std::string> MlflowClient::CreateRun(const std::string& experiment_id,
                                                    const std::string& run_name,
                                                    int64_t start_time_ms) {
  const json request = {
      {"experiment_id", experiment_id}, {"run_name", run_name}, {"start_time", start_time_ms}};
  return Field(http_->Post(absl::StrCat(kApi, "runs/create"), Dump(request)), "runs/create",
               "/run/info/run_id");
}

absl::Status MlflowClient::LogBatch(const std::string& run_id,
                                    const std::vector<MlflowMetric>& metrics,
                                    const std::vector<MlflowParam>& params) {
  json request = {{"run_id", run_id}, {"metrics", json::array()}, {"params", json::array()}};
  for (const MlflowMetric& m : metrics) {
    request["metrics"].push_back(
        {{"key", m.key}, {"value", m.value}, {"timestamp", m.timestamp_ms}, {"step", m.step}});
  }
  for (const auto& [key, value] : params) {
    request["params"].push_back({{"key", key}, {"value", value}});
  }
  return http_->Post(absl::StrCat(kApi, "runs/log-batch"), Dump(request)).status();
}

absl::Status MlflowClient::EndRun(const std::string& run_id, const std::string& status,
                                  int64_t end_time_ms) {
  const json request = {{"run_id", run_id}, {"status", status}, {"end_time", end_time_ms}};
  return http_->Post(absl::StrCat(kApi, "runs/update"), Dump(request)).status();
}

}  // namespace trellis::observe
