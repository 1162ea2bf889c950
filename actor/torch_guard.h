#ifndef TRELLIS_ACTOR_TORCH_GUARD_H_
#define TRELLIS_ACTOR_TORCH_GUARD_H_

#include <memory>
#include <string>

#include "actor/rollout_worker.h"

namespace trellis::actor {

// `inner` behind the LibTorch edge (model/torch_status.h): an exception
// escaping any of its calls comes back as that call's status, with the
// message "<worker_id> <Call>: ..." (ResourceExhausted for out of memory).
// The worker's state after such a failure is whatever the exception left.
// NewLocalActor returns its actor guarded.
std::unique_ptr<RolloutWorker> GuardTorchErrors(std::unique_ptr<RolloutWorker> inner,
                                                std::string worker_id);

}  // namespace trellis::actor

#endif  // TRELLIS_ACTOR_TORCH_GUARD_H_
