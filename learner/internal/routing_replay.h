#ifndef TRELLIS_LEARNER_INTERNAL_ROUTING_REPLAY_H_
#define TRELLIS_LEARNER_INTERNAL_ROUTING_REPLAY_H_

// The policy's forward for a mixture-of-experts model under the GRPO
// family's objectives (docs/models.md#routing-replay): with
// grpo.routing_replay every token goes to the experts its record names
// (TrainSample.routing, written by the actor), and the load-balancing loss
// (model.router_aux_loss_coef) joins the loss. A dense model's forward is
// TargetLogProbs as it is.

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "learner/internal/objective.h"
#include "model/token_batch.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::learner::internal {

// log-probs of `tb`'s targets ([B, T], as model::TargetLogProbs) for
// `samples` (tb's rows, in order; sample_ids[i] names samples[i] in
// errors), routed as the job says. Sets `routed` to the routing's part of
// the micro-batch: its loss (router_aux_loss_coef times the load-balancing
// loss times `share`, the micro-batch's share of the batch's rows, so that
// the micro-batches add up to the batch's; undefined at coefficient 0) and
// its sums, for AddRouting. InvalidArgument
// naming the sample whose record does not fit the model or its tokens.
absl::StatusOr<torch::Tensor> RoutedLogProbs(const ObjectiveInput& in, const model::TokenBatch& tb,
                                             const std::vector<const v1::TrainSample*>& samples,
                                             const std::vector<int64_t>& sample_ids,
                                             double temperature, double share,
                                             MicroResult* routed);

// Adds to `out` the load-balancing loss of a forward with `routing` (a
// mixture of experts'; nothing for a dense model's): its value to the sums
// and, with config.router_aux_loss_coef > 0, coefficient times `share` (the
// micro-batch's share of the batch's rows) times it to out->loss.
void AddLoadBalancing(const model::ExpertRouting& routing, const v1::ModelConfig& config,
                      double share, MicroResult* out);

// Adds RoutedLogProbs' part to a micro-batch's result.
void AddRouting(const MicroResult& routed, MicroResult* out);

}  // namespace trellis::learner::internal

#endif  // TRELLIS_LEARNER_INTERNAL_ROUTING_REPLAY_H_
