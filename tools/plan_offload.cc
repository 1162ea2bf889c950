// PriceOffload: the CPU offload strategies in `trellis plan` (planner.h).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "config/job_size.h"
#include "config/worker_id.h"
#include "tools/planner.h"

namespace trellis::tools {
namespace {

// The bytes of `role`'s resident `object` in `plan` (0 when it has none).
int64_t Resident(const Plan& plan, const std::string& role, const std::string& object) {
  int64_t bytes = 0;
  for (const PlanLine& l : plan.resident) {
    if (l.role == role && l.object == object) bytes += l.bytes;
  }
  return bytes;
}

}  // namespace

std::vector<PlanOffload> PriceOffload(const v1::JobConfig& job, const Plan& plan) {
  const std::string learner = config::WorkerId(v1::LEARNER).ToString();
  const std::string actor = config::WorkerId(v1::ACTOR).ToString();
  const std::string reference = config::WorkerId(v1::REFERENCE).ToString();
  std::vector<PlanOffload> out;

  // Every phase's state lives on the host; one step brings its own phase's
  // in and out (the RL phase's, or SFT's in a job without RL steps).
  PlanOffload state;
  state.strategy = "memory.offload_optimizer_state";
  state.on = job.memory().offload_optimizer_state();
  state.device_bytes_saved = Resident(plan, learner, "optimizer_state");
  state.host_bytes = state.device_bytes_saved;
  const int64_t trained = Resident(plan, learner, "gradients") / 4;  // 4 B per trained element
  const v1::OptimizerConfig& stepped =
      job.grpo().steps() > 0 ? job.grpo().optimizer() : job.sft().optimizer();
  state.bytes_moved_per_step = 2 * config::OptimizerStateBytes(stepped, trained);
  state.formula = absl::StrCat(
      "every phase's optimizer state off the device between steps; per step the stepped "
      "phase's state in and out: 2 x ",
      config::OptimizerStateBytes(stepped, trained), " B");
  out.push_back(state);

  // One reference call per step: in before it, out after.
  const int64_t ref = Resident(plan, reference, "reference_model");
  PlanOffload frozen;
  frozen.strategy = "memory.offload_frozen";
  frozen.on = job.memory().offload_frozen();
  frozen.device_bytes_saved = ref;
  frozen.host_bytes = ref;
  frozen.bytes_moved_per_step = 2 * ref;
  frozen.formula = "the reference's weights on the host between its calls: 2 x 4 B x N per step";
  out.push_back(frozen);

  // The actor's weights out after its rollout and in at the weight sync,
  // the reference as with offload_frozen; the KV cache is freed, not moved.
  const int64_t weights = Resident(plan, actor, "parameters");
  PlanOffload colocated;
  colocated.strategy = "deployment.placement colocated";
  colocated.on = job.deployment().placement() == v1::DeploymentConfig::COLOCATED;
  colocated.device_bytes_saved = weights + ref;
  colocated.host_bytes = weights + ref;
  colocated.bytes_moved_per_step = 2 * (weights + ref);
  colocated.formula =
      "the actor's weights (and the reference's) on the host while idle: 2 x (actor 4 B x N + "
      "reference) per step";
  out.push_back(colocated);
  return out;
}

}  // namespace trellis::tools
