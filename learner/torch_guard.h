#ifndef TRELLIS_LEARNER_TORCH_GUARD_H_
#define TRELLIS_LEARNER_TORCH_GUARD_H_

#include <memory>
#include <string>

#include "learner/learner_worker.h"

namespace trellis::learner {

// `inner` behind the LibTorch edge (model/torch_status.h): an exception
// escaping any of its calls comes back as that call's status, with the
// message "<worker_id> <Call>: ..." (ResourceExhausted for out of memory).
// The worker's state after such a failure is whatever the exception left.
// The role factories (roles/local_roles.h) guard every learner.
std::unique_ptr<LearnerWorker> GuardTorchErrors(std::unique_ptr<LearnerWorker> inner,
                                                std::string worker_id);

}  // namespace trellis::learner

#endif  // TRELLIS_LEARNER_TORCH_GUARD_H_
