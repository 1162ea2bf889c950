#ifndef TRELLIS_CONFIG_INTERNAL_PARALLEL_CHECKS_H_
#define TRELLIS_CONFIG_INTERNAL_PARALLEL_CHECKS_H_

// The checks of how a job splits its models (docs/parallelism.md):
// memory.zero_stage, the actor's and reference's tensor_parallel (which
// must divide the heads and MLP columns it splits) and
// memory.process_memory_limit_bytes.

#include "config/internal/checker.h"
#include "trellis/v1/job.pb.h"

namespace trellis::config::internal {

void CheckParallelism(const v1::JobConfig& job, Checker& c);

}  // namespace trellis::config::internal

#endif  // TRELLIS_CONFIG_INTERNAL_PARALLEL_CHECKS_H_
