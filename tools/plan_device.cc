#include "tools/plan_device.h"

#include <algorithm>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "config/rank_memory.h"
#include "config/worker_id.h"
#include "tools/plan_ranks.h"

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

// The GPU of one rank of each of `roles` (plan_ranks.h PerRank), with
// `learners` learner ranks.
GpuPlan PlanGpu(const Plan& plan, const v1::JobConfig& job, const std::vector<std::string>& roles,
                int64_t device_bytes, int learners) {
  const auto mine = [&](const PlanLine& l) {
    return std::find(roles.begin(), roles.end(), l.role) != roles.end();
  };
  GpuPlan gpu;
  gpu.name = absl::StrJoin(roles, " + ");
  const v1::RoleDeployment& deployment =
      DeploymentOf(job, roles.size() == 1 ? roles[0] : Id(v1::LEARNER));
  gpu.workers = roles.size() == 1
                    ? std::max(1, deployment.count()) * std::max(1, deployment.tensor_parallel())
                    : 1;
  gpu.gpus_per_worker = std::max(1, deployment.gpus_per_worker());
  std::vector<std::pair<PlanLine, std::set<std::string>>> visiting;
  for (const PlanLine& l : plan.resident) {
    if (!mine(l)) continue;
    for (const PlanLine& line : PerRank(plan, job, l, learners)) {
      if (std::optional<std::set<std::string>> stages = DeviceStages(line, job)) {
        visiting.emplace_back(line, *std::move(stages));
      } else {
        gpu.resident.push_back(line);
        gpu.resident_bytes += line.bytes;
      }
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
      if (!mine(l)) continue;
      for (const PlanLine& line : PerRank(plan, job, l, learners)) stage.lines.push_back(line);
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
  const bool colocated = out.placement == v1::DeploymentConfig::COLOCATED;
  const int learners = std::max(1, job.deployment().learner().count());
  if (colocated) {
    out.gpus.push_back(PlanGpu(plan, job, roles, device_bytes, learners));
  } else {
    for (const std::string& role : roles) {
      out.gpus.push_back(PlanGpu(plan, job, {role}, device_bytes, learners));
    }
  }
  // The learner's GPU (time-shared under colocated) at each learner count.
  const std::vector<std::string> learner_gpu = colocated ? roles : std::vector{Id(v1::LEARNER)};
  out.smallest_learner_count =
      config::SmallestLearnerCount(static_cast<double>(device_bytes), [&](int n) {
        return static_cast<double>(PlanGpu(plan, job, learner_gpu, device_bytes, n).peak_bytes);
      });
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

}  // namespace trellis::tools
