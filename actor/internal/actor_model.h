#ifndef TRELLIS_ACTOR_INTERNAL_ACTOR_MODEL_H_
#define TRELLIS_ACTOR_INTERNAL_ACTOR_MODEL_H_

// The model an actor computes with (actor/local_actor.h): its policy (under
// LoRA with the base built as the learner builds it, or shared with the
// process's other roles), its tensor-parallel group, and where each weight
// sync writes.

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "actor/local_actor.h"
#include "model/tensor_parallel.h"
#include "model/transformer.h"
#include "weightsync/transport.h"

namespace trellis::actor::internal {

struct ActorModel {
  model::Transformer policy{nullptr};
  // options.tensor_parallel > 1: the group split from `policy`.
  std::unique_ptr<model::TensorParallelModel> parallel;
  // Under a resharding sync (weightsync/reshard_ends.h SliceReceiver) with a
  // group: every rank's own tensors under weightsync::RankTensorName, which
  // each sync writes in place; `policy`'s weights are then freed, since the
  // ranks hold everything the actor computes with. Empty otherwise: syncs
  // write `policy`'s weights by name.
  weightsync::NamedTensors slices;
  // The bytes of `policy`'s base that another role of the process holds.
  int64_t shared_bytes = 0;
};

// Builds the model of `config` on options.device, splits it into
// options.tensor_parallel ranks (each on its options.rank_devices entry),
// and binds `receiver` to its layout when it is a resharding sync's end
// (a group's whole model then split on the host, never on the device).
[[nodiscard]] absl::StatusOr<ActorModel> BuildActorModel(const v1::ModelConfig& config,
                                                         int64_t vocab_size,
                                                         const LocalActorOptions& options,
                                                         weightsync::Receiver* receiver);

}  // namespace trellis::actor::internal

#endif  // TRELLIS_ACTOR_INTERNAL_ACTOR_MODEL_H_
