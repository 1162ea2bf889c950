#ifndef TRELLIS_TOOLS_PLAN_JOB_H_
#define TRELLIS_TOOLS_PLAN_JOB_H_

// `trellis plan JOB.yaml`: the planner (tools/planner.h) fed from a job:
// the sequence lengths of its data and this machine's matrix-product rate.

#include "absl/status/statusor.h"
#include "tools/planner.h"
#include "trellis/v1/job.pb.h"

namespace trellis::tools {

// The vocabulary and the longest prompt and SFT target of the job's
// training data, in tokens.
[[nodiscard]] absl::StatusOr<tools::PlanWorkload> JobWorkload(const v1::JobConfig& job);

// The longest sequence an RL update trains on: prompt + max_new_tokens - 1.
int64_t RlSequenceLength(const v1::JobConfig& job, const tools::PlanWorkload& workload);

// Validates the job, sets LibTorch's threads from it, measures this
// machine's rates (tools::MachineRates: the matrix-product roofline at the
// learner's shape, and the job's model timed at 1 and 4 layers at the
// update, reference and decode shapes, which splits each pass into what
// each layer adds and what does not grow with the depth) and plans.
[[nodiscard]] absl::StatusOr<tools::Plan> PlanJob(const v1::JobConfig& job);

}  // namespace trellis::tools

#endif  // TRELLIS_TOOLS_PLAN_JOB_H_
