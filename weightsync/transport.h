#ifndef TRELLIS_WEIGHTSYNC_TRANSPORT_H_
#define TRELLIS_WEIGHTSYNC_TRANSPORT_H_

// Moves a versioned set of named tensors from the learner to the actors.
// Every transfer is bucketed, versioned, checksummed and applied atomically
// on the receiver; every wait has a deadline.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::weightsync {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

struct TransportOptions {
  // Tensors are packed into flat buckets of at most this many bytes (a
  // tensor larger than a bucket gets a bucket of its own).
  int64_t bucket_bytes = 64 << 20;
};

class Transport {
 public:
  virtual ~Transport() = default;

  // Sender side: publishes `tensors` as `version` (which must exceed the
  // last published one). Fills gather/transfer seconds, bytes and buckets.
  [[nodiscard]] virtual absl::StatusOr<v1::WeightSyncStats> Publish(
      int64_t version, const NamedTensors& tensors) = 0;

  // Receiver side: waits up to `timeout` for a version >= `min_version`,
  // verifies it, and copies it into `dst` (matched by name and shape) all
  // at once: on any error `dst` is unchanged. Returns DeadlineExceeded when
  // nothing arrives in time, DataLoss on a checksum mismatch,
  // FailedPrecondition on a name or shape mismatch.
  [[nodiscard]] virtual absl::StatusOr<v1::WeightSyncStats> Receive(
      int64_t min_version, const NamedTensors& dst, absl::Duration timeout) = 0;
};

// Colocated learner and actors in one process: buckets are copied through
// shared memory. Only the newest version is kept, so a receiver always gets
// the newest (>= min_version). Publish reports gather = packing, transfer =
// checksumming and swapping the buckets in; Receive reports transfer =
// verifying checksums, load = copying into dst. Thread-safe; any number of
// receivers. Fault injection for tests: internal/inprocess_testing.h.
std::unique_ptr<Transport> NewInProcessTransport(TransportOptions options = {});

}  // namespace trellis::weightsync

#endif  // TRELLIS_WEIGHTSYNC_TRANSPORT_H_
