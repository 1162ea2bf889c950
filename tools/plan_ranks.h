#ifndef TRELLIS_TOOLS_PLAN_RANKS_H_
#define TRELLIS_TOOLS_PLAN_RANKS_H_

// `trellis plan` per process (docs/parallelism.md, "Planning and placing
// sharded jobs"): the plan's objects (planner.h) as one rank of their role
// holds them when the job is launched, each rank a process:
//
//   learner rank of N   under memory.zero_stage (config/rank_memory.h
//                       LearnerRank): 1 optimizer state / N; 2 also the
//                       gradients and fp32 masters / N, plus the largest
//                       unit's gradients before their reduce-scatter; 3
//                       also the parameters / N, plus the gathered buffers
//                       (the two largest blocks and the outer unit);
//                       from stage 2 the version staged for the actors
//                       is the rank's shards; activations and workspace
//                       whole (a rank trains its own micro-batches).
//   actor or reference  of a tensor-parallel group of K: the weights by the
//   rank of K           share of the parameters one rank keeps (1/K of each
//                       block's heads and MLP columns, the embedding,
//                       norms and head whole), the KV cache / K, a
//                       forward's workspace at the slice's MLP width.
//
// `trellis run` is one process holding every role whole: the plan's peak
// (Plan::peak_bytes). Each process's peak is checked against
// memory.process_memory_limit_bytes.

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tools/planner.h"
#include "trellis/v1/job.pb.h"

namespace trellis::tools {

// `line` (a resident line or a stage's transient of `plan`) as one rank of
// its role holds it, with `learners` learner ranks: one line, or for the
// learner's gradients and parameters under ZeRO-2/3 also the buckets and
// gathered lines. Lines of the scheduler and the verifier are unchanged.
std::vector<PlanLine> PerRank(const Plan& plan, const v1::JobConfig& job, const PlanLine& line,
                              int learners);

// One launched process: its resident lines and its highest stage.
struct RankPlan {
  std::string process;  // "learner-0 (one of 4 ranks, memory.zero_stage 3)"
  std::string role;     // "learner-0", as the plan's lines name it
  std::vector<PlanLine> resident;
  std::string peak_stage;  // "resident" when no stage adds to it
  std::vector<PlanLine> peak_transient;
  int64_t peak_bytes = 0;
};

struct ProcessPlan {
  int learners = 1;  // deployment.learner.count
  std::vector<RankPlan> ranks;
  // `trellis run`'s one process: every role, one learner, whole models.
  int64_t embedded_bytes = 0;
  int64_t limit_bytes = 0;  // memory.process_memory_limit_bytes (0: none)
  // The smallest deployment.learner.count whose learner rank fits the
  // limit (0: none up to config::kMaxLearnerRanks, or no limit).
  int smallest_learner_count = 0;
};

// REQUIRES: `plan` is MakePlan(job, ...).
RankPlan PlanRank(const Plan& plan, const v1::JobConfig& job, const std::string& role,
                  int learners);
ProcessPlan PlanProcesses(const Plan& plan, const v1::JobConfig& job);

// FailedPrecondition when a launched process's peak is above the limit:
// which process, its peak, the limit, and the smallest learner count that
// fits (or that none does). OK without a limit.
[[nodiscard]] absl::Status CheckProcessPlan(const ProcessPlan& processes);

void PrintProcessPlan(const ProcessPlan& processes, std::ostream& out);
nlohmann::json ProcessPlanJson(const ProcessPlan& processes);

}  // namespace trellis::tools

#endif  // TRELLIS_TOOLS_PLAN_RANKS_H_
