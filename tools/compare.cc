#include "tools/compare.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "config/job_config.h"
#include "config/flops.h"
#include "config/worker_id.h"
#include "env/run_dir.h"
#include "google/protobuf/util/message_differencer.h"
#include "tools/planner.h"
#include "tools/plan_job.h"

namespace trellis::tools {
namespace {

using nlohmann::json;

// Job fields whose change alters the workload rather than the strategy.
constexpr const char* kWorkloadFields[] = {
    "model.",          "data.",  "runtime.seed", "grpo.steps", "grpo.prompts_per_step",
    "grpo.responses_per_prompt", "sampling.", "sft.steps", "sft.batch_size", "algorithm"};

// "modified: grpo.micro_batch_size: 64 -> 32" lines, out_dir left out.
std::vector<std::string> JobChanges(v1::JobConfig base, v1::JobConfig run) {
  base.mutable_runtime()->clear_out_dir();
  run.mutable_runtime()->clear_out_dir();
  std::string text;
  {
    google::protobuf::util::MessageDifferencer differencer;
    differencer.ReportDifferencesToString(&text);
    differencer.Compare(base, run);
  }
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    lines.emplace_back(line);
  }
  return lines;
}

absl::Status ReadJson(const std::string& path, json* out) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  try {
    *out = json::parse(in);
  } catch (const json::exception& e) {
    return absl::DataLossError(absl::StrCat(path, ": ", e.what()));
  }
  return absl::OkStatus();
}

// summary.json's account of one process (ledger/process_memory.h); throws
// json::exception where a field is missing.
ProcessFacts Process(const json& process) {
  return {.allocated_bytes = process.at("tracked_bytes").get<int64_t>(),
          .heap_held_bytes = process.at("heap_held_bytes").get<int64_t>(),
          .resident_peak_bytes = process.at("peak_resident_bytes").get<int64_t>(),
          .named_bytes = process.at("named_bytes").get<int64_t>()};
}

absl::StatusOr<RunFacts> ReadRun(const std::string& dir, const v1::JobConfig* baseline_job,
                                 const CompareOptions& options, v1::JobConfig* job_out) {
  RunFacts r;
  r.dir = dir;
  const env::RunDir run(dir);
  absl::StatusOr<v1::JobConfig> job = config::LoadJobFile(run.JobYaml());
  if (!job.ok()) return job.status();
  *job_out = *job;
  if (baseline_job != nullptr) {
    r.changes = JobChanges(*baseline_job, *job);
    for (const std::string& change : r.changes) {
      for (const char* field : kWorkloadFields) {
        if (absl::StrContains(change, std::string(": ") + field) ||
            absl::StrContains(change, std::string(" ") + field)) {
          r.workload_changes.push_back(change);
          break;
        }
      }
    }
  }
  const std::string summary_path = run.Summary();
  json summary;
  if (absl::Status st = ReadJson(summary_path, &summary); !st.ok()) return st;
  const std::string ledger_path = run.Ledger();
  std::ifstream ledger(ledger_path);
  if (!ledger) return absl::NotFoundError(absl::StrCat(ledger_path, ": cannot open"));
  std::string incomplete;  // says why the mean reward stands in for the eval
  try {
    const json& s = summary;
    const json& memory = s.at("memory");
    r.peak_bytes = memory.at("peak_bytes").get<int64_t>();
    // A named copy: items() of the temporary value() would dangle.
    const json role_peaks = memory.value("role_peaks", json::object());
    for (const auto& [role, peak] : role_peaks.items()) {
      ledger::PeakAttribution p = ledger::PeakAttributionFromJson(peak);
      if (role == config::WorkerId(v1::LEARNER).ToString()) r.learner_peak = p;
      if (p.measured_bytes > r.peak.measured_bytes) r.peak = std::move(p);
    }
    const json workers = memory.value("worker_processes", json::object());
    if (memory.contains("process")) {
      r.processes[workers.empty() ? "process" : "scheduler"] = Process(memory.at("process"));
    }
    for (const auto& [worker, process] : workers.items()) r.processes[worker] = Process(process);
    r.generated_tokens_per_second = s.at("tokens_per_second").at("generated").get<double>();
    r.trained_tokens_per_second = s.at("tokens_per_second").at("trained").get<double>();
    r.communication_bytes = s.at("handoff").at("bytes").get<int64_t>();
    const json& samples = s.at("samples");
    r.failures = samples.at("error").get<int64_t>() + samples.at("timeout").get<int64_t>() +
                 samples.at("dropped").get<int64_t>();
    if (s.at("eval").contains("after")) {
      const json& after = s.at("eval").at("after");
      // An incomplete evaluation has no accuracy: the mean reward stands in.
      if (after.value("complete", true)) {
        r.quality_metric = "eval.after.accuracy";
        r.quality = after.at("accuracy").get<double>();
      } else {
        incomplete = absl::StrCat(" (eval.after INCOMPLETE: ", after.at("unscored").get<int64_t>(),
                                  " not scored)");
      }
    }
  } catch (const json::exception& e) {
    return absl::DataLossError(absl::StrCat(summary_path, ": ", e.what()));
  }

  // Step records: mean stage and step seconds, the last rewards, and the
  // samples the updates trained on.
  std::vector<double> rewards;
  double update_seconds = 0, samples_trained = 0;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(ledger, line)) {
    ++line_no;
    if (line.empty()) continue;
    try {
      const json rec = json::parse(line);
      if (rec.at("type") != "step") continue;
      ++r.steps;
      r.step_seconds += rec.at("step_seconds").get<double>();
      for (const auto& [stage, seconds] : rec.at("stage_seconds").items()) {
        r.stage_seconds[stage] += seconds.get<double>();
      }
      rewards.push_back(rec.at("mean_reward").get<double>());
      // Absent from runs recorded before the memory strategies existed.
      r.recompute_seconds += rec.value("recompute_seconds", 0.0);
      r.learner_communication_bytes += rec.value("communication_bytes", 0.0);
      r.learner_communication_seconds += rec.value("communication_seconds", 0.0);
      r.move_bytes += rec.value("move_bytes", 0.0);
      r.move_seconds += rec.value("move_seconds", 0.0);
      update_seconds += rec.at("stage_seconds").at("update").get<double>();
      samples_trained += rec.at("samples_generated").get<double>() -
                         rec.value("samples_dropped", 0.0) - rec.value("samples_surplus", 0.0);
    } catch (const json::exception& e) {
      return absl::DataLossError(absl::StrCat(ledger_path, ":", line_no, ": ", e.what()));
    }
  }
  if (r.steps > 0) {
    r.step_seconds /= r.steps;
    for (auto& [stage, seconds] : r.stage_seconds) seconds /= r.steps;
    r.recompute_seconds /= r.steps;
    r.learner_communication_bytes /= r.steps;
    r.learner_communication_seconds /= r.steps;
    r.move_bytes /= r.steps;
    r.move_seconds /= r.steps;
  }
  if (r.quality_metric.empty()) {
    const size_t n = std::min<size_t>(10, rewards.size());
    double sum = 0;
    for (size_t i = rewards.size() - n; i < rewards.size(); ++i) sum += rewards[i];
    r.quality_metric = absl::StrCat("mean reward, last ", n, " steps", incomplete);
    r.quality = n > 0 ? sum / n : 0;
  }
  if (update_seconds > 0) {
    absl::StatusOr<tools::PlanWorkload> workload = JobWorkload(*job);
    if (!workload.ok()) return workload.status();
    // Sequences at their longest (the padded length an update runs).
    const int64_t seq = RlSequenceLength(*job, *workload);
    r.learner_flops_per_second =
        samples_trained * seq *
        config::TrainFlopsPerToken(job->model(), workload->vocab_size, seq) / update_seconds;
    if (options.matmul_flops_per_second > 0) {
      r.utilization = r.learner_flops_per_second / options.matmul_flops_per_second;
    }
  }
  return r;
}

}  // namespace

absl::StatusOr<Comparison> CompareRuns(const std::vector<std::string>& dirs,
                                       const CompareOptions& options) {
  Comparison c;
  c.options = options;
  v1::JobConfig baseline_job;
  for (size_t i = 0; i < dirs.size(); ++i) {
    v1::JobConfig job;
    absl::StatusOr<RunFacts> run =
        ReadRun(dirs[i], i == 0 ? nullptr : &baseline_job, options, &job);
    if (!run.ok()) return run.status();
    if (i == 0) baseline_job = job;
    c.runs.push_back(*std::move(run));
  }
  const RunFacts& base = c.runs[0];
  for (size_t i = 1; i < c.runs.size(); ++i) {
    const RunFacts& r = c.runs[i];
    Verdict v;
    v.dir = r.dir;
    v.quality_kept = r.quality >= base.quality - options.quality_tolerance;
    v.step_time_ratio = base.step_seconds > 0 ? r.step_seconds / base.step_seconds : 0;
    v.peak_ratio = base.peak_bytes > 0 ? static_cast<double>(r.peak_bytes) / base.peak_bytes : 0;
    v.within_budget = v.step_time_ratio <= options.step_time_budget;
    if (!v.quality_kept) {
      v.reason = absl::StrFormat("rejected: quality %.4f < baseline %.4f - %.4f", r.quality,
                                 base.quality, options.quality_tolerance);
    } else if (!v.within_budget) {
      v.reason = absl::StrFormat("rejected: step time over the budget (x%.2f of the baseline)",
                                 options.step_time_budget);
    } else {
      v.reason = "accepted: quality kept, step time within the budget";
    }
    if (!r.workload_changes.empty()) {
      absl::StrAppend(&v.reason, "; WARNING: the workload differs (",
                      absl::StrJoin(r.workload_changes, "; "), ")");
    }
    if (r.failures > base.failures) {
      absl::StrAppend(&v.reason, absl::StrFormat("; %d more failures", r.failures - base.failures));
    }
    c.verdicts.push_back(std::move(v));
  }
  // Quality kept first, then within the budget, then faster; memory only
  // breaks exact ties.
  std::stable_sort(c.verdicts.begin(), c.verdicts.end(), [](const Verdict& a, const Verdict& b) {
    if (a.quality_kept != b.quality_kept) return a.quality_kept;
    if (a.within_budget != b.within_budget) return a.within_budget;
    if (a.step_time_ratio != b.step_time_ratio) return a.step_time_ratio < b.step_time_ratio;
    return a.peak_ratio < b.peak_ratio;
  });
  for (size_t i = 0; i < c.verdicts.size(); ++i) c.verdicts[i].rank = static_cast<int>(i) + 1;
  return c;
}

}  // namespace trellis::tools
