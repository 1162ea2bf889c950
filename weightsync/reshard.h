#ifndef TRELLIS_WEIGHTSYNC_RESHARD_H_
#define TRELLIS_WEIGHTSYNC_RESHARD_H_

// Weight sync that reshards (docs/parallelism.md): N learner ranks, each
// holding only its flat shard of every unit, publish a version; K
// tensor-parallel actor ranks each receive only their slices. No rank
// holds the whole model.
//
// Every (learner rank n, actor rank k) pair is one link of a point-to-point
// transport from a TransportRegistry ("gloo", or "nccl" where built): the
// learner rank's ReshardSender hosts one Publisher per actor rank, its
// rendezvous store at ReshardOptions::PairPort(n, k), and publishes to it
// only the pieces that actor rank needs (ReshardPlan::Moves), as strided
// views of the shards, in checksummed buckets of at most bucket_bytes (the
// same on both ends: pieces are matched by name). When the actor rank
// already waits, the transport sends them from the shards in place instead
// of packing a copy (gloo_transport.h); Publish returns once nothing reads
// the shards.
// The actor rank's ReshardReceiver pulls the version from every learner
// rank at once, each link placing its pieces in the rank's slice tensors
// (tcp: received there; gloo: a slice that one piece fills takes the
// bucket's memory, no copy), and hands
// them back only when every link delivered exactly the version asked for. Versioning, deadlines,
// the job's secret, reconnection and the refusal of versions that will never be published are the
// transport's (gloo_transport.h, internal/staging.h).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "weightsync/registry.h"
#include "weightsync/reshard_plan.h"
#include "weightsync/transport.h"

namespace trellis::weightsync {

struct ReshardOptions {
  // Each link's transport options: bucket_bytes, connect_timeout, secret,
  // local_host, cuda_device, num_receivers (the actor replicas each link
  // serves) and receiver_index (an actor replica's slot) are used as they
  // are; host and port are set per link.
  TransportOptions transport;
  // The transport's name in the registry given to Start.
  std::string transport_name = "gloo";
  // The host of each learner rank's stores (empty: transport.host for all).
  std::vector<std::string> learner_hosts;
  // The store port of every pair, learner-major: ports[n * K + k].
  std::vector<int> ports;

  std::string PairHost(int learner) const;
  int PairPort(const ReshardPlan& plan, int learner, int actor) const;
};

// What one actor rank received: its slices, named, in ReshardPlan::Slices
// order and shapes.
struct ReshardReceived {
  int64_t version = 0;
  NamedTensors tensors;
  // The payload bytes that arrived from all learner ranks.
  int64_t bytes = 0;
};

// One learner rank's end.
class ReshardSender {
 public:
  // Hosts the rank's K stores and starts serving. InvalidArgument for a bad
  // rank or too few ports, else what the transport's publisher returns.
  // `registry` null: the built-in transports.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ReshardSender>> Start(
      std::shared_ptr<const ReshardPlan> plan, int learner_rank, const ReshardOptions& options,
      const TransportRegistry* registry = nullptr);

  // Publishes `version` (above the last one) from `shards`: one 1-D tensor
  // per unit, the unit's dtype and shard_numel elements. InvalidArgument
  // for a bad shard; the transport's errors naming the actor rank. One call
  // at a time; every actor rank's link packs and streams at once.
  [[nodiscard]] absl::StatusOr<v1::WeightSyncStats> Publish(int64_t version,
                                                            const std::vector<at::Tensor>& shards);

  // The bytes of the buckets this rank keeps staged for its actor ranks.
  int64_t StagedBytes();

  // Flips a byte of bucket `bucket` of the version staged for `actor_rank`.
  [[nodiscard]] absl::Status CorruptForTesting(int actor_rank, int bucket);

 private:
  ReshardSender(std::shared_ptr<const ReshardPlan> plan, int rank)
      : plan_(std::move(plan)), rank_(rank) {}

  const std::shared_ptr<const ReshardPlan> plan_;
  const int rank_;
  int64_t bucket_bytes_ = 0;
  std::vector<std::unique_ptr<Publisher>> publishers_;  // [actor rank]
};

// One actor rank's end.
class ReshardReceiver {
 public:
  // Nothing connects until the first Receive. InvalidArgument for a bad
  // rank or too few ports.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ReshardReceiver>> Start(
      std::shared_ptr<const ReshardPlan> plan, int actor_rank, const ReshardOptions& options,
      const TransportRegistry* registry = nullptr);

  // Receives from every learner rank within `timeout` the newest version
  // at or past `version` that all of them serve (a rank that has moved on
  // is asked again by all). Without `into` the slices come back in tensors
  // of the receiver's that are never written again while the caller holds
  // them (a later Receive fills them again only once the caller let go of
  // them), all or nothing. With `into` (one contiguous tensor per slice, in
  // Slices(rank) order, of its shape and dtype: InvalidArgument otherwise)
  // each link writes its pieces there in place (tcp: as they arrive; gloo:
  // from its buckets, a slice one piece fills by taking its bucket's memory
  // where the tensor owns its storage); a failed link may leave pieces
  // written. Errors name the learner rank:
  // the transport's (DeadlineExceeded, Unavailable when a peer is gone,
  // DataLoss naming the bucket whose checksum failed, FailedPrecondition
  // for a version that will never be published). Calls are serialized.
  [[nodiscard]] absl::StatusOr<ReshardReceived> Receive(
      int64_t version, absl::Duration timeout, const std::vector<at::Tensor>* into = nullptr);

  // The payload bytes received by every successful Receive so far.
  int64_t received_bytes();
  // The bytes of the buckets the links keep for their next versions.
  int64_t BucketBytes();

 private:
  ReshardReceiver(std::shared_ptr<const ReshardPlan> plan, int rank)
      : plan_(std::move(plan)), rank_(rank) {}

  const std::shared_ptr<const ReshardPlan> plan_;
  const int rank_;
  int64_t bucket_bytes_ = 0;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Receiver>> receivers_ ABSL_GUARDED_BY(mu_);  // [learner rank]
  int64_t received_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // The slices last handed back: each that no single piece fills is filled
  // again by the next Receive once the caller let go of it (no fresh pages
  // to fault in); the others take their bucket's memory anew.
  std::vector<at::Tensor> last_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trellis::weightsync

#endif  // TRELLIS_WEIGHTSYNC_RESHARD_H_
