#include "tools/plan_device.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "config/choice.h"
#include "config/worker_id.h"

namespace trellis::tools {
namespace {

std::string Id(v1::Role role) { return config::WorkerId(role).ToString(); }

const v1::RoleDeployment& DeploymentOf(const v1::JobConfig& job, const std::string& role) {
  const v1::DeploymentConfig& d = job.deployment();
  if (role == Id(v1::ACTOR)) return d.actor();
  if (role == Id(v1::REFERENCE)) return d.reference();
  return d.learner();
}

// The stages in which a resident object of the plan is on the device;
// nullopt: every stage.
std::optional<std::set<std::string>> DeviceStages(const PlanLine& line, const v1::JobConfig& job) {
  const bool colocated = job.deployment().placement() == v1::DeploymentConfig::COLOCATED;
  if (line.role == Id(v1::LEARNER) && line.object == "optimizer_state" &&
      job.memory().offload_optimizer_state()) {
    return std::set<std::string>{"sft", "update"};
  }
  if (line.role == Id(v1::REFERENCE) && (colocated || job.memory().offload_frozen())) {
    return std::set<std::string>{"reference"};
  }
  if (line.role == Id(v1::ACTOR) && colocated) {
    return std::set<std::string>{"rollout", "eval", "weight_sync"};
  }
  return std::nullopt;
}

// A resident line as one worker of its role holds it: ZeRO-1 learner ranks
// each hold about 1/count of the optimizer state.
PlanLine PerWorker(PlanLine line, const v1::JobConfig& job) {
  const int learners = job.deployment().learner().count();
  if (line.role == Id(v1::LEARNER) && line.object == "optimizer_state" &&
      job.memory().zero_stage() == 1 && learners > 1) {
    line.bytes = (line.bytes + learners - 1) / learners;
    absl::StrAppend(&line.formula, ", / ", learners, " learner ranks (ZeRO-1)");
  }
  return line;
}

GpuPlan PlanGpu(const Plan& plan, const v1::JobConfig& job, const std::vector<std::string>& roles,
                int64_t device_bytes) {
  const auto mine = [&](const PlanLine& l) {
    return std::find(roles.begin(), roles.end(), l.role) != roles.end();
  };
  GpuPlan gpu;
  gpu.name = absl::StrJoin(roles, " + ");
  const v1::RoleDeployment& deployment =
      DeploymentOf(job, roles.size() == 1 ? roles[0] : Id(v1::LEARNER));
  gpu.workers = roles.size() == 1 ? std::max(1, deployment.count()) : 1;
  gpu.gpus_per_worker = std::max(1, deployment.gpus_per_worker());
  std::vector<std::pair<PlanLine, std::set<std::string>>> visiting;
  for (const PlanLine& l : plan.resident) {
    if (!mine(l)) continue;
    const PlanLine line = PerWorker(l, job);
    if (std::optional<std::set<std::string>> stages = DeviceStages(line, job)) {
      visiting.emplace_back(line, *std::move(stages));
    } else {
      gpu.resident.push_back(line);
      gpu.resident_bytes += line.bytes;
    }
  }
  gpu.peak_bytes = gpu.resident_bytes;
  gpu.peak_stage = "resident";
  for (const PlanStage& st : plan.stages) {
    GpuStage stage{st.stage, {}, gpu.resident_bytes};
    for (const auto& [line, stages] : visiting) {
      if (stages.count(st.stage) > 0) stage.lines.push_back(line);
    }
    for (const PlanLine& l : st.transient) {
      if (mine(l)) stage.lines.push_back(l);
    }
    if (stage.lines.empty()) continue;
    for (const PlanLine& l : stage.lines) stage.bytes += l.bytes;
    if (stage.bytes > gpu.peak_bytes) {
      gpu.peak_bytes = stage.bytes;
      gpu.peak_stage = stage.stage;
    }
    gpu.stages.push_back(std::move(stage));
  }
  gpu.fits = gpu.peak_bytes <= device_bytes;
  return gpu;
}

}  // namespace

DevicePlan PlanDevices(const Plan& plan, const v1::JobConfig& job, int64_t device_bytes,
                       std::string device_source) {
  DevicePlan out;
  out.placement = job.deployment().placement();
  out.device_bytes = device_bytes;
  out.device_source = std::move(device_source);
  std::vector<std::string> roles;
  for (v1::Role role : {v1::ACTOR, v1::LEARNER, v1::REFERENCE}) {
    const auto named = [&](const PlanLine& l) { return l.role == Id(role); };
    bool present = std::any_of(plan.resident.begin(), plan.resident.end(), named);
    for (const PlanStage& st : plan.stages) {
      present = present || std::any_of(st.transient.begin(), st.transient.end(), named);
    }
    if (present) roles.push_back(Id(role));
  }
  if (out.placement == v1::DeploymentConfig::COLOCATED) {
    out.gpus.push_back(PlanGpu(plan, job, roles, device_bytes));
  } else {
    for (const std::string& role : roles) {
      out.gpus.push_back(PlanGpu(plan, job, {role}, device_bytes));
    }
  }
  out.fits = std::all_of(out.gpus.begin(), out.gpus.end(), [](const GpuPlan& g) { return g.fits; });
  for (const GpuPlan& g : out.gpus) {
    if (g.gpus_per_worker > 1) {
      out.notes.push_back(absl::StrCat(
          g.name, ": ", g.gpus_per_worker,
          " GPUs per worker; a worker computes on its first (models are not sharded across a "
          "worker's GPUs), which is the one priced here"));
    }
  }
  out.notes.push_back(
      "bytes are the objects' allocated bytes; the CUDA context and the caching allocator's "
      "reserved-but-free blocks (fragmentation, measured by the ledger: memory.device in "
      "summary.json) come on top");
  if (job.memory().offload_optimizer_state()) {
    out.notes.push_back(
        "memory.offload_optimizer_state: the optimizer state is counted in the stages that train "
        "only, for their whole length (an upper bound: it comes for the optimizer step)");
  }
  return out;
}

void PrintDevicePlan(const DevicePlan& plan, std::ostream& out) {
  const auto gib = [](int64_t b) { return static_cast<double>(b) / (int64_t{1} << 30); };
  out << absl::StrFormat(
      "\n== device memory: runtime.device cuda, deployment.placement %s; each GPU %.2f GiB (%s) "
      "==\n",
      config::ChoiceName(plan.placement), gib(plan.device_bytes), plan.device_source);
  for (const GpuPlan& g : plan.gpus) {
    out << absl::StrFormat(
        "\n-- GPU of %s (%d worker%s, %d GPU%s each): peak %.3f GiB at %s, %s --\n", g.name,
        g.workers, g.workers == 1 ? "" : "s", g.gpus_per_worker, g.gpus_per_worker == 1 ? "" : "s",
        gib(g.peak_bytes), g.peak_stage, g.fits ? "fits" : "DOES NOT FIT");
    for (const PlanLine& l : g.resident) {
      out << absl::StrFormat("  %-12s %-16s %12.3f GiB  %s\n", l.role, l.object, gib(l.bytes),
                             l.formula);
    }
    out << absl::StrFormat("  %-29s %12.3f GiB\n", "resident", gib(g.resident_bytes));
    for (const GpuStage& st : g.stages) {
      out << absl::StrFormat("  + %s: %.3f GiB\n", st.stage, gib(st.bytes));
      for (const PlanLine& l : st.lines) {
        out << absl::StrFormat("    %-12s %-16s %10.3f GiB  %s\n", l.role, l.object, gib(l.bytes),
                               l.formula);
      }
    }
  }
  out << absl::StrFormat("\ndevice memory: %s\n",
                         plan.fits ? "every GPU fits" : "does not fit: see the GPUs marked above");
  for (const std::string& note : plan.notes) out << "note: " << note << "\n";
}

nlohmann::json DevicePlanJson(const DevicePlan& plan) {
  using nlohmann::json;
  const auto lines = [](const std::vector<PlanLine>& ls) {
    json a = json::array();
    for (const PlanLine& l : ls) {
      a.push_back(
          {{"role", l.role}, {"object", l.object}, {"bytes", l.bytes}, {"formula", l.formula}});
    }
    return a;
  };
  json gpus = json::array();
  for (const GpuPlan& g : plan.gpus) {
    json stages = json::array();
    for (const GpuStage& st : g.stages) {
      stages.push_back({{"stage", st.stage}, {"bytes", st.bytes}, {"lines", lines(st.lines)}});
    }
    gpus.push_back({{"name", g.name},
                    {"workers", g.workers},
                    {"gpus_per_worker", g.gpus_per_worker},
                    {"resident", lines(g.resident)},
                    {"resident_bytes", g.resident_bytes},
                    {"stages", stages},
                    {"peak_bytes", g.peak_bytes},
                    {"peak_stage", g.peak_stage},
                    {"fits", g.fits}});
  }
  return {{"placement", config::ChoiceName(plan.placement)},
          {"device_bytes", plan.device_bytes},
          {"device_source", plan.device_source},
          {"gpus", gpus},
          {"fits", plan.fits},
          {"notes", plan.notes}};
}

}  // namespace trellis::tools
