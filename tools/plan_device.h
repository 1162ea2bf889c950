#ifndef TRELLIS_TOOLS_PLAN_DEVICE_H_
#define TRELLIS_TOOLS_PLAN_DEVICE_H_

// `trellis plan` for a job that computes on CUDA (runtime.device CUDA): the
// plan's objects (planner.h: weights, gradients, optimizer state,
// activations, KV cache, workspace) put on GPUs as deployment.placement
// gives them, each GPU's peak over the stages, and whether it fits the
// device memory the plan assumes (docs/gpu.md, "The ledger on CUDA").
//
//   DISAGGREGATED  the actor, the learner and the reference each on a GPU
//                  of their own (per worker: deployment.<role>.count
//                  workers, gpus_per_worker each); a GPU's peak is its
//                  role's residents and its largest stage's transients,
//                  each as one rank holds it (plan_ranks.h: a learner rank
//                  under memory.zero_stage, an actor or reference rank of
//                  its tensor-parallel group).
//   COLOCATED      one GPU time-shared by the three: the learner's objects
//                  stay; the actor's weights are there only in the stages
//                  that generate (rollout, eval) and take the new weights
//                  (weight_sync), the reference's only in its own stage;
//                  the GPU's peak is the highest stage of that device.
//
// memory.offload_optimizer_state keeps the optimizer state in host memory
// except in the stages that train (counted there, as if it stayed on the
// device for the whole stage: an upper bound); memory.offload_frozen keeps
// the reference in host memory between its uses. Bytes are allocated
// bytes: the CUDA context and the caching allocator's fragmentation (the
// ledger measures it) come on top.

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "tools/planner.h"
#include "trellis/v1/job.pb.h"

namespace trellis::tools {

// The device memory the plan assumes unless told: an H200, 143,771 MiB as
// nvidia-smi reports it (NVIDIA states 141 GB), taken as 140 GiB.
inline constexpr double kDefaultDeviceMemoryGib = 140;

struct GpuStage {
  std::string stage;  // StageName()
  // On the device in this stage beyond the GPU's residents.
  std::vector<PlanLine> lines;
  int64_t bytes = 0;  // residents + lines
};

struct GpuPlan {
  // "actor-0", or "actor-0 + learner-0 + reference-0" time-sharing one GPU.
  std::string name;
  // Ranks with a GPU like this one (deployment.<role>.count x its
  // tensor_parallel), and the
  // GPUs each is given (deployment.<role>.gpus_per_worker; the plan
  // prices the one it computes on).
  int workers = 1;
  int gpus_per_worker = 1;
  std::vector<PlanLine> resident;
  int64_t resident_bytes = 0;
  std::vector<GpuStage> stages;
  int64_t peak_bytes = 0;
  std::string peak_stage;  // "resident" when no stage adds to it
  bool fits = false;
};

struct DevicePlan {
  v1::DeploymentConfig::Placement placement = v1::DeploymentConfig::DISAGGREGATED;
  int64_t device_bytes = 0;
  // Where device_bytes came from, printed with it.
  std::string device_source;
  std::vector<GpuPlan> gpus;
  // Every GPU's peak is at most device_bytes.
  bool fits = false;
  // The smallest deployment.learner.count whose learner GPU fits
  // device_bytes (0: none up to config::kMaxLearnerRanks).
  int smallest_learner_count = 0;
  std::vector<std::string> notes;
};

// REQUIRES: `plan` is MakePlan(job, ...); device_bytes > 0.
DevicePlan PlanDevices(const Plan& plan, const v1::JobConfig& job, int64_t device_bytes,
                       std::string device_source);

void PrintDevicePlan(const DevicePlan& plan, std::ostream& out);
nlohmann::json DevicePlanJson(const DevicePlan& plan);

}  // namespace trellis::tools

#endif  // TRELLIS_TOOLS_PLAN_DEVICE_H_
