#ifndef TRELLIS_LOOP_ROLES_H_
#define TRELLIS_LOOP_ROLES_H_

// The roles a run's loop drives, through their interfaces only: embedded
// runs bind in-process engines, launched runs gRPC clients with the same
// contracts, and the loop does not change.

#include "actor/rollout_worker.h"
#include "environment/environment.h"
#include "learner/learner_worker.h"
#include "reference/reference_worker.h"
#include "verifier/verifier.h"

namespace trellis::loop {

struct Roles {
  // Null for a recipe that does not roll out (RecipeSpec::rolls_out).
  actor::RolloutWorker* actor = nullptr;
  learner::LearnerWorker* learner = nullptr;
  // Null when the job does not need it (NeedsReference).
  reference::ReferenceWorker* reference = nullptr;
  // Null for a recipe that does not roll out.
  verifier::VerifierClient* verifier = nullptr;
  // The job's environment (job.environment.name set: multi-turn rollouts,
  // loop/episode_runner.h); null otherwise.
  environment::Environment* environment = nullptr;
};

}  // namespace trellis::loop

#endif  // TRELLIS_LOOP_ROLES_H_
