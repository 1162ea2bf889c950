#ifndef TRELLIS_REFERENCE_TORCH_GUARD_H_
#define TRELLIS_REFERENCE_TORCH_GUARD_H_

#include <memory>
#include <string>

#include "reference/reference_worker.h"

namespace trellis::reference {

// `inner` behind the LibTorch edge (model/torch_status.h): an exception
// escaping any of its calls comes back as that call's status, with the
// message "<worker_id> <Call>: ..." (ResourceExhausted for out of memory).
// NewLocalReference returns its reference guarded.
std::unique_ptr<ReferenceWorker> GuardTorchErrors(std::unique_ptr<ReferenceWorker> inner,
                                                  std::string worker_id);

}  // namespace trellis::reference

#endif  // TRELLIS_REFERENCE_TORCH_GUARD_H_
