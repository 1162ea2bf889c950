#include "tools/measure_commands.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "config/job_config.h"
#include "env/env.h"
#include "env/run_dir.h"
#include "model/matmul_rate.h"
#include "run/embedded_job.h"
#include "tools/compare.h"
#include "tools/plan_device.h"
#include "tools/plan_job.h"
#include "tools/plan_ranks.h"
#include "tools/planner.h"
#include "tools/probe.h"

namespace trellis::tools {
namespace {

absl::StatusOr<v1::JobConfig> JobArgument(const std::vector<std::string>& positional,
                                          const std::string& command) {
  if (positional.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(command, ": more than one job file (", positional[0], ", ", positional[1],
                     ")"));
  }
  return positional.empty() ? run::DefaultJob() : config::LoadJobFile(positional[0]);
}

absl::StatusOr<double> DoubleFlag(const std::map<std::string, std::string>& flags,
                                  const std::string& name, double fallback) {
  auto it = flags.find(name);
  if (it == flags.end()) return fallback;
  double value = 0;
  if (!absl::SimpleAtod(it->second, &value) || value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": expected a non-negative number, found \"", it->second, "\""));
  }
  return value;
}

absl::Status WriteJson(const std::string& path, const nlohmann::json& j) {
  return env::Env::Default()->WriteFileAtomically(path, j.dump(2) + "\n");
}

absl::Status PlanCommand(const std::map<std::string, std::string>& flags,
                  const std::vector<std::string>& positional, std::ostream& out) {
  absl::StatusOr<v1::JobConfig> job = JobArgument(positional, "plan");
  if (!job.ok()) return job.status();
  // The device memory a CUDA job's GPUs are priced against.
  const auto gib_flag = flags.find("--device_memory_gib");
  const bool cuda = job->runtime().device() == v1::RuntimeConfig::CUDA;
  if (gib_flag != flags.end() && !cuda) {
    return absl::InvalidArgumentError(
        "--device_memory_gib: the job computes on the CPU (runtime.device cpu); it prices GPUs "
        "of a runtime.device cuda job");
  }
  absl::StatusOr<double> gib = DoubleFlag(flags, "--device_memory_gib", kDefaultDeviceMemoryGib);
  if (!gib.ok()) return gib.status();
  if (*gib <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device_memory_gib: expected a positive number, found \"", gib_flag->second, "\""));
  }
  absl::StatusOr<tools::Plan> plan = tools::PlanJob(*job);
  if (!plan.ok()) return plan.status();
  tools::PrintPlan(*plan, out);
  nlohmann::json j = tools::PlanJson(*plan);
  const tools::ProcessPlan processes = tools::PlanProcesses(*plan, *job);
  tools::PrintProcessPlan(processes, out);
  j["processes"] = tools::ProcessPlanJson(processes);
  if (cuda) {
    const tools::DevicePlan device = tools::PlanDevices(
        *plan, *job, static_cast<int64_t>(*gib * (int64_t{1} << 30)),
        gib_flag != flags.end()
            ? absl::StrCat("--device_memory_gib ", gib_flag->second)
            : "the default, an H200: 141 GB as NVIDIA states it, 140 GiB; --device_memory_gib "
              "sets another");
    tools::PrintDevicePlan(device, out);
    j["device"] = tools::DevicePlanJson(device);
  }
  auto json_path = flags.find("--json");
  if (json_path != flags.end()) {
    if (absl::Status s = WriteJson(json_path->second, j); !s.ok()) return s;
  }
  // After the plan is shown: the numbers behind a refusal.
  return tools::CheckProcessPlan(processes);
}

absl::Status ProbeCommand(const std::map<std::string, std::string>& flags,
                   const std::vector<std::string>& positional, std::ostream& out) {
  absl::StatusOr<v1::JobConfig> job = JobArgument(positional, "probe");
  if (!job.ok()) return job.status();
  auto vary = flags.find("--vary");
  if (vary == flags.end()) {
    return absl::InvalidArgumentError("probe: --vary KEY=V1,V2,... is required");
  }
  const std::vector<std::string> kv = absl::StrSplit(vary->second, absl::MaxSplits('=', 1));
  if (kv.size() != 2 || kv[0].empty() || kv[1].empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--vary: expected KEY=V1,V2,..., found \"", vary->second, "\""));
  }
  tools::ProbeOptions options;
  options.key = kv[0];
  options.values = absl::StrSplit(kv[1], ',', absl::SkipEmpty());
  options.out_dir = flags.count("--out") ? flags.at("--out") : "runs/probe";
  if (flags.count("--role")) options.role = flags.at("--role");
  if (flags.count("--steps") &&
      (!absl::SimpleAtoi(flags.at("--steps"), &options.steps) || options.steps < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--steps: expected a positive integer, found \"", flags.at("--steps"), "\""));
  }
  absl::StatusOr<tools::ProbeResult> result = tools::RunProbe(*job, options);
  if (!result.ok()) return result.status();
  tools::PrintProbe(*result, out);
  const std::string path = env::RunDir(options.out_dir).Probe();
  out << "wrote " << path << "\n";
  return WriteJson(path, tools::ProbeJson(*result));
}

absl::Status CompareCommand(const std::map<std::string, std::string>& flags,
                     const std::vector<std::string>& positional, std::ostream& out) {
  if (positional.size() < 2) {
    return absl::InvalidArgumentError(
        "compare: needs a baseline run directory and at least one candidate");
  }
  tools::CompareOptions options;
  absl::StatusOr<double> tolerance = DoubleFlag(flags, "--tolerance", options.quality_tolerance);
  if (!tolerance.ok()) return tolerance.status();
  absl::StatusOr<double> budget = DoubleFlag(flags, "--budget", options.step_time_budget);
  if (!budget.ok()) return budget.status();
  options.quality_tolerance = *tolerance;
  options.step_time_budget = *budget;
  // The baseline's learner shape, measured here: the runs' own machine when
  // compare runs where they ran.
  absl::StatusOr<v1::JobConfig> job = config::LoadJobFile(env::RunDir(positional[0]).JobYaml());
  if (!job.ok()) return job.status();
  absl::StatusOr<tools::PlanWorkload> workload = tools::JobWorkload(*job);
  if (!workload.ok()) return workload.status();
  options.matmul_flops_per_second = model::MeasureMatmulRate(
      job->grpo().micro_batch_size() * tools::RlSequenceLength(*job, *workload),
      job->model().d_model(), job->model().d_ff());
  absl::StatusOr<tools::Comparison> comparison = tools::CompareRuns(positional, options);
  if (!comparison.ok()) return comparison.status();
  tools::PrintComparison(*comparison, out);
  const env::RunDir baseline(positional[0]);
  const std::string md = baseline.CompareMarkdown();
  const std::string js = baseline.CompareJson();
  const std::string markdown = tools::ComparisonMarkdown(*comparison);
  if (absl::Status s = env::Env::Default()->WriteFileAtomically(md, markdown); !s.ok()) return s;
  out << "wrote " << md << " and " << js << "\n";
  return WriteJson(js, tools::ComparisonJson(*comparison));
}

}  // namespace

std::set<std::string> MeasureFlags(const std::string& command) {
  if (command == "plan") return {"--json", "--device_memory_gib"};
  if (command == "probe") return {"--vary", "--steps", "--role", "--out"};
  return {"--tolerance", "--budget"};
}

absl::Status RunMeasureCommand(const std::string& command,
                               const std::map<std::string, std::string>& flags,
                               const std::vector<std::string>& positional, std::ostream& out) {
  if (command == "plan") return PlanCommand(flags, positional, out);
  if (command == "probe") return ProbeCommand(flags, positional, out);
  return CompareCommand(flags, positional, out);
}

}  // namespace trellis::tools
