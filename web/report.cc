#include "web/report.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "config/job_config.h"
#include "env/env.h"
#include "env/run_dir.h"
#include "ledger/run_view.h"
#include "web/page.h"

namespace trellis::web {
namespace {

using nlohmann::json;

// The JSON object in `path`; InvalidArgument naming it when it is not one.
absl::StatusOr<json> ReadJsonObject(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  json j = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": expected a JSON object"));
  }
  return j;
}

}  // namespace

absl::StatusOr<std::string> WriteReport(const std::string& run_dir) {
  const env::RunDir run(run_dir);
  const std::string summary_path = run.Summary();
  if (!env::Env::Default()->Exists(summary_path)) {
    return absl::FailedPreconditionError(absl::StrCat(
        run_dir, ": no summary.json; a report needs a finished run (for a running job, "
                 "open its dashboard: --http)"));
  }
  absl::StatusOr<json> summary = ReadJsonObject(summary_path);
  if (!summary.ok()) return summary.status();
  absl::StatusOr<v1::JobConfig> job = config::LoadJobFile(run.JobYaml());
  if (!job.ok()) return job.status();

  ledger::RunView view;
  if (absl::Status s = view.AddFile(run.Ledger()); !s.ok()) return s;
  json data = json::parse(view.ViewJson());
  data["summary"] = *std::move(summary);
  data["job"] = {{"name", job->name()}, {"algorithm", job->algorithm()}};
  const std::string comparison_path = run.CompareJson();
  if (env::Env::Default()->Exists(comparison_path)) {
    absl::StatusOr<json> comparison = ReadJsonObject(comparison_path);
    if (!comparison.ok()) return comparison.status();
    data["comparison"] = *std::move(comparison);
  }
  const std::string path = run.Report();
  if (absl::Status s = env::Env::Default()->WriteFileAtomically(path, DashboardPage(data.dump()));
      !s.ok()) {
    return s;
  }
  return path;
}

}  // namespace trellis::web
