#ifndef TRELLIS_REFERENCE_REFERENCE_WORKER_H_
#define TRELLIS_REFERENCE_REFERENCE_WORKER_H_

// The reference role as the scheduler sees it: per-token log-probs of
// responses under a frozen model: the starting policy (for the KL
// penalty), or in a distill job the teacher (config::ReferenceModel).

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "ledger/ledger.h"
#include "model/device.h"
#include "text/tokenizer.h"
#include "trellis/v1/job.pb.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::model {
class SharedBase;  // model/shared_base.h
}  // namespace trellis::model

namespace trellis::reference {

class ReferenceWorker {
 public:
  virtual ~ReferenceWorker() = default;
  // One TokenLogProbs per sample, in order, each as long as the sample's
  // response. InvalidArgument names a sample that does not fit the model.
  [[nodiscard]] virtual absl::StatusOr<v1::LogProbResponse> LogProbs(
      const v1::LogProbRequest& request) = 0;

  // Takes the frozen weights from a safetensors file (the policy at the
  // moment the reference is taken). Until then LogProbs fails with
  // FailedPrecondition. A distill teacher loads its own weights when it is
  // built: Load is then FailedPrecondition.
  [[nodiscard]] virtual absl::Status Load(const std::string& weights_path) = 0;

  // A reward model's score of each whole sample (prompt + response), in
  // order. FailedPrecondition when the job has no reward model
  // (ppo.reward is not reward_model).
  [[nodiscard]] virtual absl::StatusOr<v1::ScoreResponse> Scores(
      const v1::LogProbRequest& request) = 0;
};

// An in-process frozen policy, and the job's reward model when ppo.reward
// is reward_model (loaded here, from ppo.reward_model_path); in a distill
// job the teacher of distill.teacher, loaded here from its init_checkpoint
// (a safetensors file or a Hugging Face directory), else its path. Log-probs use
// softmax(logits / temperature) with sampling.temperature, as the actor
// samples. Records the reference model's and the reward model's bytes in
// `ledger` (may be null) when they load. The tokenizer and ledger must
// outlive it. Its models live on `device` (model::RoleDevice); batches
// are built on the host and the log-probs and scores come back to it.
// `shared_base` (may be null): LoRA on one base (model/shared_base.h): a
// reference whose weights are the base the process's learner holds reads
// that base instead of a copy of its own (not when its weights move to the
// host between calls: memory.offload_frozen, the colocated placement).
// `rank_devices`: where each rank of deployment.reference.tensor_parallel
// computes (model::RankDevices); empty: all on `device`.
[[nodiscard]] absl::StatusOr<std::unique_ptr<ReferenceWorker>> NewLocalReference(
    const v1::JobConfig& job, const text::Tokenizer* tokenizer, ledger::Ledger* ledger,
    const model::Device& device = {},
    std::shared_ptr<const model::SharedBase> shared_base = nullptr,
    const std::vector<model::Device>& rank_devices = {});

}  // namespace trellis::reference

#endif  // TRELLIS_REFERENCE_REFERENCE_WORKER_H_
