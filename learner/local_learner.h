#ifndef TRELLIS_LEARNER_LOCAL_LEARNER_H_
#define TRELLIS_LEARNER_LOCAL_LEARNER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "config/worker_id.h"
#include "learner/group_member.h"
#include "learner/learner_worker.h"
#include "ledger/ledger.h"
#include "model/device.h"
#include "trellis/v1/job.pb.h"
#include "weightsync/transport.h"

namespace trellis::model {
class SharedBase;  // model/shared_base.h
}  // namespace trellis::model

namespace trellis::learner {

struct LocalLearnerOptions {
  std::string worker_id = config::WorkerId(v1::LEARNER).ToString();
  int64_t vocab_size = 0;
  int32_t pad_id = 0;
  // Seeds the initial weights (when the job names no init_checkpoint).
  uint64_t seed = 1;
  // Where the models, their gradients and optimizer state live
  // (model::RoleDevice); batches are built on the host and log-probs come
  // back to it.
  model::Device device;
  // Its rank in the learners that train each batch together (job.memory.
  // zero_stage); NewLocalLearner joins the group, waiting for every rank
  // up to deployment.call_timeout_ms.
  GroupMember group;
  // LoRA on one base (model/shared_base.h): the learner holds its policy's
  // frozen base here for the process's other roles, when it computes in
  // float32 (under bf16 its base is its own). Null: nothing shared.
  std::shared_ptr<model::SharedBase> shared_base;
};

// An in-process learner: the policy, AdamW (decoupled weight decay, none
// on norms and biases) per phase (SFT, GRPO), global-norm clipping, and
// micro-batched updates. Publishes weights through `transport` (the weight
// transport's publishing end; may be null where nothing is published);
// records parameters, gradients, optimizer state and activations in
// `ledger` (may be null). The transport and ledger must outlive the learner.
[[nodiscard]] absl::StatusOr<std::unique_ptr<LearnerWorker>> NewLocalLearner(
    const v1::JobConfig& job, const LocalLearnerOptions& options,
    weightsync::Publisher* transport, ledger::Ledger* ledger);

}  // namespace trellis::learner

#endif  // TRELLIS_LEARNER_LOCAL_LEARNER_H_
