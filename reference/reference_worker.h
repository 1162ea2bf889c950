#ifndef TRELLIS_REFERENCE_REFERENCE_WORKER_H_
#define TRELLIS_REFERENCE_REFERENCE_WORKER_H_

// The reference role as the scheduler sees it: per-token log-probs of
// responses under the frozen starting policy (for the KL penalty).

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "ledger/ledger.h"
#include "model/tokenizer.h"
#include "trellis/v1/job.pb.h"
#include "trellis/v1/rollout.pb.h"

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
  // FailedPrecondition.
  [[nodiscard]] virtual absl::Status Load(const std::string& weights_path) = 0;
};

// An in-process frozen policy. Log-probs use softmax(logits / temperature),
// as the actor samples. Records the reference model's bytes in `ledger`
// (may be null) when it loads. The tokenizer and ledger must outlive it.
std::unique_ptr<ReferenceWorker> NewLocalReference(const v1::ModelConfig& model,
                                                   const model::Tokenizer* tokenizer,
                                                   double temperature,
                                                   ledger::Ledger* ledger);

}  // namespace trellis::reference

#endif  // TRELLIS_REFERENCE_REFERENCE_WORKER_H_
