#ifndef TRELLIS_ACTOR_ROLLOUT_WORKER_H_
#define TRELLIS_ACTOR_ROLLOUT_WORKER_H_

// The actor role as the scheduler sees it: sample responses, and take new
// weights when the learner publishes them. Embedded mode binds the local
// engine below; distributed mode binds a gRPC client with the same contract.

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::actor {

class RolloutWorker {
 public:
  virtual ~RolloutWorker() = default;

  // Samples request.responses_per_prompt responses for every prompt, in
  // prompt order, each tagged with the policy version that produced it.
  // InvalidArgument when a prompt plus max_new_tokens exceeds the model's
  // max_seq_len, naming the prompt.
  [[nodiscard]] virtual absl::StatusOr<v1::GenerateResponse> Generate(
      const v1::GenerateRequest& request) = 0;

  // Brings the worker's weights to policy `version` (or newer) from its
  // weight transport. Sampling never sees half-new weights.
  [[nodiscard]] virtual absl::StatusOr<v1::WeightSyncStats> SyncWeights(
      int64_t version) = 0;

  virtual int64_t policy_version() const = 0;
};

}  // namespace trellis::actor

#endif  // TRELLIS_ACTOR_ROLLOUT_WORKER_H_
