#ifndef TRELLIS_CONFIG_RANK_MEMORY_H_
#define TRELLIS_CONFIG_RANK_MEMORY_H_

// What one process of a job holds when the model is split across ranks
// (docs/parallelism.md, "Planning and placing sharded jobs"): a learner
// rank of a group of N under memory.zero_stage, an actor or reference
// replica of a tensor-parallel group of K ranks (threads of one process).
// `trellis plan` itemizes these lines (tools/plan_ranks.h);
// config::CheckJobFitsMemory prices each process of
// the job with them and refuses one above the machine's memory or
// memory.process_memory_limit_bytes. No LibTorch.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "config/job_size.h"
#include "trellis/v1/job.pb.h"

namespace trellis::config {

// Whether a launched job's weights go from every learner rank's flat
// shards to the actor ranks' slices (weightsync/reshard_ends.h) rather than
// whole from rank 0: memory.zero_stage 2 or 3 without LoRA, on the gloo,
// tcp or nccl transport (when the recipe has actors). An embedded run never
// does.
bool ReshardsWeights(const v1::JobConfig& job);

// The units ZeRO-3 gathers, in parameters: one transformer block (every
// block has the same size), and the outer unit (embedding, final norm and
// the LM head unless tied). ParameterCount(s) = L x block + outer.
int64_t OuterParameters(const ModelShape& s);
int64_t BlockParameters(const ModelShape& s);

// The shape one rank of a tensor-parallel group of `k` computes with: the
// query heads, key/value heads and MLP (or each expert's) columns divided
// by k, the embedding, norms and head whole. ParameterCount of it is the
// rank's slice of the weights, KvCacheBytes of it its heads of the cache.
// REQUIRES: k >= 1 divides n_heads, n_kv_heads and d_ff (ValidateJob).
ModelShape TensorParallelShape(const ModelShape& s, int k);

// A learner's model state in bytes: the whole model's as one learner holds
// it (the caller fills it: tools/planner.cc from its lines, PriceProcesses
// from the floor's), or one rank's share of it (LearnerRank).
struct LearnerState {
  double parameters = 0;
  double gradients = 0;
  double optimizer_state = 0;
  double master_weights = 0;  // fp32 masters under memory.precision bf16
  // ZeRO-3: the parameters gathered at once, the two largest blocks (the
  // next block's gather overlaps this one's compute) and the outer unit.
  double gathered = 0;
  // ZeRO-2 and 3: the largest unit's whole gradients before they are
  // reduce-scattered into the shards.
  double buckets = 0;
  double total() const;
};

// One rank's share of `whole` in a group of `ranks` under `zero_stage`:
//   0          everything whole;
//   1          optimizer state / N;
//   2          gradients, optimizer state and masters / N, + buckets;
//   3          all four / N, + buckets + gathered.
// A group of one trains as stage 0 does (job.proto MemoryConfig).
// `weight_bytes` is a parameter element's size (2 under bf16).
LearnerState LearnerRank(const LearnerState& whole, const ModelShape& s, int64_t weight_bytes,
                         int zero_stage, int ranks);

// Bytes as the memory checks' messages write them: "3.8 GiB".
std::string GiBText(double bytes);

// A priced process: "learner-0", "actor-0 (tensor-parallel rank 0 of 2)",
// or every role in one process for `trellis run`.
struct ProcessPrice {
  std::string process;
  double bytes = 0;
  std::string what;  // the terms, for messages
};

// How the job's roles map to processes: `trellis run` holds every role in
// one process; `trellis launch` starts one process per rank.
enum class ProcessLayout { kEmbedded, kLaunched };

// A lower bound of each process's peak (sequences at their shortest, as
// JobMemoryFloor): for kLaunched one learner rank of
// deployment.learner.count (or `learners` when > 0), one actor rank and one
// reference rank where the job has them; for kEmbedded the one process
// (one learner, whole models). `vocab_size` as ShapeOf takes it.
std::vector<ProcessPrice> PriceProcesses(const v1::JobConfig& job, ProcessLayout layout,
                                         int64_t vocab_size, int learners = 0);

// The smallest learner count at or below kMaxLearnerRanks whose learner
// rank `price` gives at most `limit_bytes`; 0 when none does.
inline constexpr int kMaxLearnerRanks = 4096;
int SmallestLearnerCount(double limit_bytes,
                         const std::function<double(int learners)>& price);

// FailedPrecondition when memory.process_memory_limit_bytes is set and a
// process of `layout` is priced above it, naming the process, its price
// and terms, the limit, and the smallest deployment.learner.count that
// fits when the learner is over it (or that none does).
[[nodiscard]] absl::Status CheckProcessMemoryLimit(const v1::JobConfig& job,
                                                   ProcessLayout layout);

}  // namespace trellis::config

#endif  // TRELLIS_CONFIG_RANK_MEMORY_H_
