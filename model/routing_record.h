#ifndef TRELLIS_MODEL_ROUTING_RECORD_H_
#define TRELLIS_MODEL_ROUTING_RECORD_H_

// Routing replay's records (job.proto grpo.routing_replay; rollout.proto
// ExpertRouting): the experts a mixture-of-experts policy routed each
// position of a sample to, one byte per (position, MoE layer, slot), as the
// actor writes them and the learner replays them on a TokenBatch.

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/token_batch.h"
#include "trellis/v1/job.pb.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::model {

// The shape of one position's record.
struct RoutingShape {
  int64_t layers = 0;  // MoE layers
  int64_t top_k = 0;   // experts per token
  int64_t num_experts = 0;

  int64_t bytes_per_position() const { return layers * top_k; }
};

// The shape a model of `config` records: every layer is an MoE layer.
// REQUIRES: config.num_experts() > 0.
RoutingShape RoutingShapeOf(const v1::ModelConfig& config);

// Appends `chosen` ([positions, layers, top_k] integer experts, any device)
// to `bytes`, a position at a time.
void AppendRouting(const torch::Tensor& chosen, std::string* bytes);

// The record of `positions` positions of `shape` holding `bytes`.
v1::ExpertRouting MakeRouting(const RoutingShape& shape, std::string bytes);

// OK when `record` holds `positions` positions of `shape`, every expert
// below shape.num_experts; else InvalidArgument naming `what` (the sample).
absl::Status CheckRouting(const v1::ExpertRouting& record, const RoutingShape& shape,
                          int64_t positions, absl::string_view what);

// The replay input of `batch` ([B, T, layers, top_k] int64, host): row i's
// columns below its live length from records[i] (checked), the rest (pad)
// routed to experts 0..top_k-1.
torch::Tensor PlaceRouting(absl::Span<const v1::ExpertRouting* const> records,
                           const TokenBatch& batch, const RoutingShape& shape);

// How many of `batch`'s live positions were routed to a different set of
// experts in some layer in `own` than in `replayed` (both [B, T, layers,
// top_k]), and how many were compared.
struct RoutingAgreement {
  int64_t differing = 0;
  int64_t compared = 0;
};
RoutingAgreement CompareRouting(const torch::Tensor& own, const torch::Tensor& replayed,
                                const TokenBatch& batch);

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_ROUTING_RECORD_H_
