#ifndef TRELLIS_CONFIG_INTERNAL_MODEL_CHECKS_H_
#define TRELLIS_CONFIG_INTERNAL_MODEL_CHECKS_H_

// The checks of a job's models (config/job_validate.cc): their shapes, a
// mixture of experts' fields, and grpo.routing_replay
// (docs/models.md#routing-replay).

#include <string>

#include "config/internal/checker.h"
#include "trellis/v1/job.pb.h"

namespace trellis::config::internal {

// `m` as the job names it at `p` ("model.", "distill.teacher.").
void CheckModel(const std::string& p, const v1::ModelConfig& m, Checker& c);

// Routing replay needs a mixture-of-experts policy whose experts fit the
// record's byte, a recipe of the GRPO family's objective, and single-turn
// rollouts (a multi-turn episode's observation tokens are routed by later
// calls, which do not record yet).
void CheckRoutingReplay(const v1::JobConfig& job, Checker& c);

}  // namespace trellis::config::internal

#endif  // TRELLIS_CONFIG_INTERNAL_MODEL_CHECKS_H_
