#ifndef TRELLIS_ACTOR_ROLLOUT_WORKER_H_
#define TRELLIS_ACTOR_ROLLOUT_WORKER_H_

// The actor role as the scheduler sees it: sample responses, and take new
// weights when the learner publishes them. Embedded mode binds the local
// engine below; distributed mode binds a gRPC client with the same contract.

#include <cstdint>
#include <functional>
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

  // Generate that hands over samples as they are ready: `on_part` gets each
  // part (whole groups; every sample carries its prompt_id) as soon as the
  // worker has it, possibly from another thread, before the call returns;
  // the returned response holds every sample, as Generate's would. The
  // default hands over the whole response as one part.
  using PartSink = std::function<void(const v1::GenerateResponse& part)>;
  [[nodiscard]] virtual absl::StatusOr<v1::GenerateResponse> GenerateStreaming(
      const v1::GenerateRequest& request, const PartSink& on_part) {
    absl::StatusOr<v1::GenerateResponse> response = Generate(request);
    if (response.ok() && on_part) on_part(*response);
    return response;
  }

  // Generate for a caller that may leave: `stop` is polled before sampling
  // and between decode steps, and once it returns true the work stops with
  // Cancelled (no samples), so that no worker stays busy after its caller
  // (a cancelled call, a passed deadline) has gone. The default runs
  // Generate whole.
  using StopFn = std::function<bool()>;
  [[nodiscard]] virtual absl::StatusOr<v1::GenerateResponse> GenerateUntil(
      const v1::GenerateRequest& request, const StopFn& stop) {
    (void)stop;
    return Generate(request);
  }

  // Brings the worker's weights to policy `version` (or newer) from its
  // weight transport. Sampling never sees half-new weights.
  [[nodiscard]] virtual absl::StatusOr<v1::WeightSyncStats> SyncWeights(
      int64_t version) = 0;

  virtual int64_t policy_version() const = 0;
};

}  // namespace trellis::actor

#endif  // TRELLIS_ACTOR_ROLLOUT_WORKER_H_
