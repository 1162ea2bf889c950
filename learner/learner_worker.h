#ifndef TRELLIS_LEARNER_LEARNER_WORKER_H_
#define TRELLIS_LEARNER_LEARNER_WORKER_H_

// The learner role as the scheduler sees it: supervised and policy-gradient
// updates, weight publication, weight snapshots.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::learner {

class LearnerWorker {
 public:
  virtual ~LearnerWorker() = default;

  // One optimizer step of cross-entropy on the target tokens (prompt tokens
  // masked), token-mean over the whole batch.
  [[nodiscard]] virtual absl::StatusOr<v1::TrainStats> SftStep(
      const v1::SftBatch& batch) = 0;

  // One optimizer step of the GRPO objective over the whole batch, split
  // into micro-batches whose accumulated gradient equals the full-batch
  // gradient.
  [[nodiscard]] virtual absl::StatusOr<v1::TrainStats> TrainStep(
      const v1::TrainBatch& batch) = 0;

  // Publishes the current weights as the current policy version to the
  // actors' weight transport.
  [[nodiscard]] virtual absl::StatusOr<v1::WeightSyncStats> PublishWeights() = 0;

  // Writes the current weights as safetensors (atomically).
  [[nodiscard]] virtual absl::Status SaveWeights(const std::string& path) = 0;

  // Starts at 0 and grows by one with every optimizer step.
  virtual int64_t policy_version() const = 0;
};

}  // namespace trellis::learner

#endif  // TRELLIS_LEARNER_LEARNER_WORKER_H_
