#ifndef TRELLIS_WEIGHTSYNC_RESHARD_ENDS_H_
#define TRELLIS_WEIGHTSYNC_RESHARD_ENDS_H_

// A launched job's resharding weight sync as its roles see it
// (docs/parallelism.md, "Weight sync that reshards"): every learner rank
// holds a ShardPublisher and every actor a SliceReceiver, which the worker
// makes in place of the job's whole-tensor Publisher and Receiver
// (launch/weight_ends.h). Each role finds its end by type and binds it to
// its model's flat layout once built (model/flat_layout.h FlatUnitsOf), so
// both ends plan the same moves: the learner rank then publishes its
// shards, and the actor receives only its ranks' slices.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "model/shard_layout.h"
#include "weightsync/reshard.h"
#include "weightsync/transport.h"

namespace trellis::weightsync {

// The name a SliceReceiver gives tensor `name` of tensor-parallel rank
// `rank` of a group of more than one: "tp<rank>/<name>".
std::string RankTensorName(int rank, std::string_view name);

// Each learner rank hosts a directory (a store at its own transport
// address, the job's secret) listing the ports of its K links; each actor
// reads every rank's directory on its first Receive.
struct ReshardEndOptions {
  // Every link's transport options (reshard.h ReshardOptions::transport):
  // the publisher's host and port are its directory's; num_receivers is the
  // job's actor count, receiver_index an actor's slot.
  TransportOptions transport;
  // The transport's name in the built-in registry: gloo or nccl.
  std::string transport_name = "gloo";
  // The learner ranks (a SliceReceiver counts its directories instead).
  int learner_ranks = 1;
  int actor_ranks = 1;
};

// One learner rank's end.
class ShardPublisher final : public Publisher {
 public:
  ShardPublisher(ReshardEndOptions options, int learner_rank);
  ~ShardPublisher() override;

  // Plans the sync from the learner's layout (FlatShards::layouts(): the
  // shards go out in float32, what actors sample in), starts serving its K
  // links on free ports and lists them in its directory. InvalidArgument
  // when the units do not fit the ranks, Unavailable when the directory
  // cannot be hosted, else the transport's error.
  [[nodiscard]] absl::Status Bind(std::vector<model::FlatUnit> units);

  // Publishes this rank's `shards` (one per unit, in Bind's order) as
  // `version`. FailedPrecondition before Bind.
  [[nodiscard]] absl::StatusOr<v1::WeightSyncStats> PublishShards(
      int64_t version, const std::vector<at::Tensor>& shards);

  // Whole tensors do not go through a resharding sync: FailedPrecondition.
  [[nodiscard]] absl::StatusOr<v1::WeightSyncStats> Publish(int64_t version,
                                                            const NamedTensors& tensors) override;

  // The bytes staged for the actor ranks (0 before Bind).
  int64_t StagedBytes();

 private:
  struct Directory;
  const ReshardEndOptions options_;
  const int rank_;
  absl::Mutex mu_;
  std::unique_ptr<Directory> directory_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<ReshardSender> sender_ ABSL_GUARDED_BY(mu_);
};

// One actor's end: its options.actor_ranks tensor-parallel ranks'
// receivers, reaching learner rank n's directory at directories[n].
class SliceReceiver final : public Receiver {
 public:
  SliceReceiver(ReshardEndOptions options, std::vector<std::pair<std::string, int>> directories);

  // One per directory.
  int learner_ranks() const { return static_cast<int>(directories_.size()); }

  // Plans the sync from the actor's model's layout over learner_ranks()
  // (float32). InvalidArgument when the units are over another rank count.
  [[nodiscard]] absl::Status Bind(std::vector<model::FlatUnit> units);

  // Receives the newest version at or past `min_version` that every
  // learner rank serves into `dst`, in place: for one rank the model's
  // tensors by name, for more each rank's under RankTensorName, a slice
  // taking its bucket's memory where the tensor owns its storage (no copy).
  // The first call reads every learner rank's directory (within `timeout`).
  // FailedPrecondition, nothing written, when `dst` and the sync's slices
  // differ by a name, or before Bind; the ranks' errors as
  // ReshardReceiver::Receive gives them, after which `dst` may be partly
  // written (the caller's weights are then no version).
  [[nodiscard]] absl::StatusOr<v1::WeightSyncStats> Receive(int64_t min_version,
                                                            const NamedTensors& dst,
                                                            absl::Duration timeout) override;

 private:
  // Reads the directories and starts every rank's links.
  absl::Status Connect(absl::Duration timeout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ReshardEndOptions options_;
  const std::vector<std::pair<std::string, int>> directories_;
  absl::Mutex mu_;
  std::shared_ptr<const ReshardPlan> plan_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<ReshardReceiver>> ranks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trellis::weightsync

#endif  // TRELLIS_WEIGHTSYNC_RESHARD_ENDS_H_
