// How close `trellis plan` comes to a run: for three small GRPO jobs that
// differ in micro-batch, sequence length and model size, a mixture of
// experts with routing replay, and a distill job whose teacher is the third
// job's trained policy, the plan's peak and step time (per stage) next to
// what an embedded run of the same job measured. Step times are medians over the steps after the first (the
// first pays for thread pools and first-touch allocations); the process
// runs the first configuration once before measuring anything, for the same
// reason.
//
//   build/bench/plan_bench [--steps=8] [--out=/tmp/plan_bench]

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "tools/planner.h"
#include "run/embedded_job.h"
#include "tools/plan_job.h"
#include "tests/job_shapes.h"

ABSL_FLAG(int, steps, 8, "GRPO steps of each measured run");
ABSL_FLAG(std::string, out, "/tmp/plan_bench", "directory for the runs");

namespace trellis {
namespace {

using nlohmann::json;

struct Config {
  std::string name;
  v1::JobConfig job;
};

// tests/measure_test.cc's three configurations, the third with 4 experts
// of which 2 per token and routing replay, and the first distilled from the
// third's policy (written by its run into `out`/2), with `steps` GRPO steps.
std::vector<Config> Configs(int steps, const std::filesystem::path& out) {
  absl::StatusOr<v1::JobConfig> tiny = testing_util::TinyJobConfig();
  if (!tiny.ok()) {
    std::cerr << tiny.status() << "\n";
    std::exit(1);
  }
  std::vector<v1::JobConfig> jobs = testing_util::PlannerJobs(*tiny);
  for (v1::JobConfig& job : jobs) job.mutable_grpo()->set_steps(steps);
  v1::JobConfig moe = jobs[2];
  moe.mutable_model()->set_num_experts(4);
  moe.mutable_model()->set_experts_per_token(2);
  moe.mutable_grpo()->set_routing_replay(true);
  v1::JobConfig distill = jobs[0];
  distill.set_algorithm("distill");
  *distill.mutable_distill()->mutable_teacher() = jobs[2].model();
  distill.mutable_distill()->mutable_teacher()->set_init_checkpoint(
      (out / "2" / "policy.safetensors").string());
  return {{"d64 L2 micro 8", jobs[0]},
          {"d64 L2 micro 16, max_new 10", jobs[1]},
          {"d128 L3 micro 8", jobs[2]},
          {"d128 L3 4 experts, 2 a token", moe},
          {"d64 L2 from d128 L3 teacher", distill}};
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

int Main() {
  const std::filesystem::path out = absl::GetFlag(FLAGS_out);
  std::cout << absl::StrFormat("%-30s %-10s %10s %10s %7s\n", "configuration", "stage",
                               "plan s", "measured s", "ratio");
  const std::vector<Config> configs = Configs(absl::GetFlag(FLAGS_steps), out);
  {
    std::ostringstream progress;
    const absl::Status warm =
        run::RunEmbeddedJob(configs[0].job, (out / "warm-up").string(), progress);
    if (!warm.ok()) {
      std::cerr << "warm-up: " << warm << "\n" << progress.str();
      return 1;
    }
  }
  for (size_t i = 0; i < configs.size(); ++i) {
    const Config& config = configs[i];
    absl::StatusOr<tools::Plan> plan = tools::PlanJob(config.job);
    if (!plan.ok()) {
      std::cerr << config.name << ": " << plan.status() << "\n";
      return 1;
    }
    const std::filesystem::path dir = out / std::to_string(i);
    std::filesystem::remove_all(dir);
    std::ostringstream progress;
    if (absl::Status s = run::RunEmbeddedJob(config.job, dir.string(), progress); !s.ok()) {
      std::cerr << config.name << ": " << s << "\n" << progress.str();
      return 1;
    }
    std::map<std::string, std::vector<double>> stage_seconds;
    std::vector<double> step_seconds;
    std::ifstream ledger(dir / "ledger.jsonl");
    std::string line;
    while (std::getline(ledger, line)) {
      const json rec = json::parse(line);
      if (rec.at("type") != "step" || rec.at("step").get<int>() == 0) continue;
      step_seconds.push_back(rec.at("step_seconds").get<double>());
      for (const auto& [stage, seconds] : rec.at("stage_seconds").items()) {
        stage_seconds[stage].push_back(seconds.get<double>());
      }
    }
    for (const tools::PlanTime& t : plan->step_time) {
      const double measured = Median(stage_seconds[t.stage]);
      std::cout << absl::StrFormat("%-30s %-10s %10.4f %10.4f %7.2f\n", config.name, t.stage,
                                   t.seconds, measured, measured > 0 ? t.seconds / measured : 0);
    }
    const double measured_step = Median(step_seconds);
    std::cout << absl::StrFormat("%-30s %-10s %10.4f %10.4f %7.2f\n", config.name, "step",
                                 plan->step_seconds, measured_step,
                                 plan->step_seconds / measured_step);
    const json summary = json::parse(std::ifstream(dir / "summary.json"));
    const double peak = summary.at("memory").at("peak_bytes").get<double>();
    std::cout << absl::StrFormat("%-30s %-10s %9.2fM %9.2fM %7.3f\n", config.name, "peak",
                                 plan->peak_bytes / 1048576.0, peak / 1048576.0,
                                 plan->peak_bytes / peak);
  }
  return 0;
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return trellis::Main();
}
