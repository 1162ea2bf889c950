#ifndef TRELLIS_LEARNER_INTERNAL_ADAMW_STATE_H_
#define TRELLIS_LEARNER_INTERNAL_ADAMW_STATE_H_

// AdamW state as named tensors, for checkpoints. For parameter j of param
// group g, under `prefix`:
//   <prefix>g<g>.p<j>.step            I64 scalar (bias-correction step count)
//   <prefix>g<g>.p<j>.exp_avg         like the parameter
//   <prefix>g<g>.p<j>.exp_avg_sq      like the parameter
//   <prefix>g<g>.p<j>.max_exp_avg_sq  like the parameter (amsgrad only)
// Parameters that have no state yet (never stepped) have no entries.

#include <map>
#include <string>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "model/safetensors.h"

namespace trellis::learner::internal {

// Appends copies of `optimizer`'s state to `out`.
void AppendAdamWState(torch::optim::AdamW& optimizer, const std::string& prefix,
                      model::NamedTensors* out);

// Replaces `optimizer`'s state with the entries under `prefix` in
// `tensors`. Fails with FailedPrecondition, changing nothing, when a tensor's
// shape differs from its parameter's, an entry is incomplete, or an entry
// names a group or parameter the optimizer does not have; the message names
// the tensor and `where` (e.g. the file).
[[nodiscard]] absl::Status LoadAdamWState(const std::map<std::string, torch::Tensor>& tensors,
                                          const std::string& prefix, const std::string& where,
                                          torch::optim::AdamW& optimizer);

}  // namespace trellis::learner::internal

#endif  // TRELLIS_LEARNER_INTERNAL_ADAMW_STATE_H_
