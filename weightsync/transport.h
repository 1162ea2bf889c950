#ifndef TRELLIS_WEIGHTSYNC_TRANSPORT_H_
#define TRELLIS_WEIGHTSYNC_TRANSPORT_H_

// Moves a versioned set of named tensors from the learner (the publisher)
// to the actors (the receivers). Every transfer is bucketed, versioned,
// checksummed and applied atomically on the receiver; every wait has a
// deadline. Each transport has a publishing and a receiving end, made by
// its own constructors or by name from a registry (registry.h).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::weightsync {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// What makes either end of any transport; each transport reads the fields
// it names.
struct TransportOptions {
  // Tensors are packed into flat buckets of at most this many bytes (a
  // tensor larger than a bucket gets a bucket of its own).
  int64_t bucket_bytes = 64 << 20;
  // The publisher's address. gloo, tcp, nccl, cuda_ipc: its rendezvous store
  // (comm/tcp_store.h), which the publisher binds and the receivers reach (port required: comm::PickFreeTcpPort).
  // grpc: the server carrying the publisher's WeightStream service
  // (receivers). inprocess: names the publisher within its registry.
  std::string host = "127.0.0.1";
  int port = 0;
  // gloo, tcp, nccl: the receiver slots a publisher serves, and a receiver's
  // slot in 0..num_receivers-1.
  int num_receivers = 1;
  int receiver_index = 0;
  // gloo, tcp, nccl: bounds connecting to the store and each slot's
  // rendezvous.
  absl::Duration connect_timeout = absl::Seconds(30);
  // gloo receivers: the address this end's gloo device binds (the
  // publisher connects to it). Empty: `host` when that is a loopback
  // address, else this machine's hostname as resolved by gloo.
  std::string local_host;
  // nccl: this process's GPU.
  int cuda_device = 0;
  // gloo, tcp, nccl, cuda_ipc: the job's secret, which the publisher's
  // store asks of every client (comm/store_server.h); empty: an insecure job.
  std::string secret;
  // tcp receivers: each tensor's bytes go straight into the dst tensor of
  // its name when that is a contiguous CPU tensor of its dtype and size
  // (the rest through the buckets, as always), and are checksummed there:
  // no copy after the kernel's, but a Receive that fails may leave dst
  // partly written, so the caller must then count dst as no version. Other
  // transports ignore it.
  bool receive_in_place = false;
};

class Publisher {
 public:
  virtual ~Publisher() = default;

  // Publishes `tensors` as `version` (which must exceed the last published
  // one; FailedPrecondition otherwise, InvalidArgument for an empty or
  // duplicate name or an undefined tensor). Fills gather/transfer seconds,
  // bytes and buckets. May be called from any thread.
  [[nodiscard]] virtual absl::StatusOr<v1::WeightSyncStats> Publish(
      int64_t version, const NamedTensors& tensors) = 0;
};

class Receiver {
 public:
  virtual ~Receiver() = default;

  // Waits up to `timeout` for a version >= `min_version`, verifies it, and
  // copies it into `dst` (matched by name and shape) all at once: on any
  // error `dst` is unchanged. Returns DeadlineExceeded when nothing arrives
  // in time (naming `min_version`), Unavailable when the publisher is gone,
  // DataLoss on a checksum mismatch, FailedPrecondition on a name or shape
  // mismatch. Calls are serialized.
  [[nodiscard]] virtual absl::StatusOr<v1::WeightSyncStats> Receive(int64_t min_version,
                                                                    const NamedTensors& dst,
                                                                    absl::Duration timeout) = 0;
};

}  // namespace trellis::weightsync

#endif  // TRELLIS_WEIGHTSYNC_TRANSPORT_H_
