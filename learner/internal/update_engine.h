#ifndef TRELLIS_LEARNER_INTERNAL_UPDATE_ENGINE_H_
#define TRELLIS_LEARNER_INTERNAL_UPDATE_ENGINE_H_

// What every update of a local learner shares, whatever its objective
// (objective.h): micro-batching and gradient accumulation over this rank's
// rows, the memory strategies through TrainableSet (bf16 masters, LoRA's
// trained adapters, ZeRO-1 shards; activation checkpointing is the
// models'), gradient summing over the learner group, global-norm clipping,
// learning-rate warm-up, the optimizer step (skipped, and counted, when the
// loss or the gradient is not finite), each phase's optimizer state,
// memory.offload_optimizer_state (the state in host memory between steps),
// the policy version, and the ledger records of an update.

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "learner/internal/data_parallel.h"
#include "learner/internal/flat_shards.h"
#include "learner/internal/learner_models.h"
#include "learner/internal/objective.h"
#include "learner/internal/phases.h"
#include "ledger/ledger.h"
#include "trellis/v1/job.pb.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::learner::internal {

class UpdateEngine {
 public:
  // `job` and `models` must outlive the engine; `ledger` may be null.
  UpdateEngine(const v1::JobConfig& job, std::string worker_id, LearnerModels* models,
               std::unique_ptr<DataParallelGroup> group, ledger::Ledger* ledger);

  // One optimizer step of `objective` over its batch: the update of its
  // phase, then objective.Complete, then the new policy version and the
  // learner's resident objects in the stats and the ledger.
  [[nodiscard]] absl::StatusOr<v1::TrainStats> Step(Objective& objective);
  // The objective's micro-batches without gradients: the batch's loss and
  // stats under the current weights. No update, no new version.
  [[nodiscard]] absl::StatusOr<v1::TrainStats> Measure(Objective& objective);
  // The update of phase `id` over a batch of `rows` rows: its optimizer
  // made on first use; zero_grad; the forward and backward of this rank's
  // micro-batches; gradients to the optimizer's tensors, summed over the
  // group, and clipping; warm-up; step; parameters from their owners. The
  // stats summed over the group, without a version.
  [[nodiscard]] absl::StatusOr<v1::TrainStats> Update(PhaseId id, int64_t rows,
                                                      const MicroFn& micro);

  // memory.zero_stage 2 and 3: the policy's tensors become flat shards
  // (flat_shards.h; a group of one holds them whole, and can restore a
  // sharded checkpoint). Nothing otherwise.
  [[nodiscard]] absl::Status ShardParameters();
  // The flat shards, or null.
  FlatShards* flat() { return flat_.get(); }

  // Builds `phase`'s optimizer over phase `id`'s tensors unless it has one
  // (over this rank's share of them with memory.zero_stage 1 to 3).
  void EnsureOptimizer(Phase& phase, PhaseId id);
  Phase& phase(PhaseId id) { return phases_[static_cast<size_t>(id)]; }
  DataParallelGroup& group() { return *group_; }
  // Starts at 0 and grows by one with every Step.
  int64_t version() const { return version_; }
  void set_version(int64_t version) { version_ = version; }

 private:
  // The highest live bytes of the Updates since the last Finish and what it
  // held beyond what was live before: the forward's saved activations and
  // the scratch of the backward or optimizer step (workspace). Memory an
  // update leaves behind (the first step's gradients and optimizer state)
  // is not workspace.
  struct UpdatePeak {
    int64_t bytes = 0;
    int64_t workspace = 0;
    // bf16: the model's own gradients, alive from backward until they are
    // copied up into the masters' (counted as gradients at the peak).
    int64_t model_gradients = 0;
    // The policy phases' optimizer state at the peak: an optimizer's first
    // step creates its state, after the backward passes' peaks.
    int64_t optimizer_state = 0;
    // `peak` seen in a window that opened at `base` live bytes, holding
    // `saved` activations, with `optimizer` bytes of optimizer state;
    // `after`: live bytes once the window's work ended.
    void Observe(int64_t peak, int64_t base, int64_t saved, int64_t after, int64_t optimizer);
  };
  // The policy's resident bytes after an update.
  struct Resident {
    int64_t parameters = 0, adapters = 0, gradients = 0, masters = 0;
  };

  // micro(begin, end), its failure named with this worker and the rows;
  // around it (and `backward`, when given, which the micro-batch's loss
  // goes through) the flat shards' BeginMicro and EndMicro.
  absl::StatusOr<MicroResult> RunMicro(
      const MicroFn& micro, int64_t begin, int64_t end,
      const std::function<void(MicroResult&)>& backward = nullptr);
  // After a Step's updates: the new version, and the resident objects in
  // `stats` and the ledger (`buffer_bytes`: the rollout buffer the update
  // trained on, 0 when it kept none).
  v1::TrainStats Finish(PhaseId id, v1::TrainStats stats, int64_t buffer_bytes);
  Resident PolicyBytes() const;
  // Every policy phase's optimizer state: they all stay resident
  // (checkpoints hold them all).
  int64_t PolicyOptimizerBytes();
  // A batch whose summed `loss` or `grad_norm` is not finite takes no
  // optimizer step: marks `stats` skipped_nonfinite. FailedPrecondition
  // once runtime.max_nonfinite_skips updates in a row were skipped.
  absl::Status SkipNonFinite(double loss, double grad_norm, v1::TrainStats* stats);
  void RecordObjects(ledger::Stage stage, const Resident& resident, int64_t activation_bytes,
                     int64_t buffer_bytes);
  // What the critic holds: weights and gradients, and the separate
  // critic's optimizer state (a shared value head's is in the policy's).
  int64_t CriticBytes();
  // Bytes of `phase`'s optimizer state on the device: 0 while offloaded.
  static int64_t DeviceStateBytes(Phase& phase);
  // memory.offload_optimizer_state: phase `id`'s optimizer state in from
  // host memory just before its step, out right after; each move a ledger
  // record (optimizer_state, or critic for PPO's separate critic). Without
  // the option, nothing.
  void MoveOptimizerState(Phase& phase, PhaseId id, ledger::MoveDirection direction);

  const v1::JobConfig& job_;
  const std::string worker_id_;
  LearnerModels* const models_;
  std::unique_ptr<DataParallelGroup> group_;
  std::unique_ptr<FlatShards> flat_;
  ledger::Ledger* const ledger_;
  std::array<Phase, kPhaseCount> phases_;
  UpdatePeak peak_;
  int64_t version_ = 0;
  // Updates skipped in a row for a non-finite loss or gradient.
  int32_t consecutive_skips_ = 0;
};

}  // namespace trellis::learner::internal

#endif  // TRELLIS_LEARNER_INTERNAL_UPDATE_ENGINE_H_
