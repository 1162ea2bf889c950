#ifndef TRELLIS_WEIGHTSYNC_NCCL_TRANSPORT_H_
#define TRELLIS_WEIGHTSYNC_NCCL_TRANSPORT_H_

// Weights between GPUs through NCCL point-to-point (ncclSend / ncclRecv),
// built as trellis::weightsync_nccl when CMake finds CUDA and NCCL
// (TRELLIS_WITH_NCCL).
//
// The same shape as the gloo transport (gloo_transport.h): one publisher
// hosting the rendezvous store (comm/tcp_store.h), `num_receivers` slots, each slot its own
// two-rank NCCL communicator (rank 0 the publisher), so a dead receiver
// never holds up another. The publisher's slot thread creates the
// ncclUniqueId when a receiver (re)connects and publishes it through the
// store; requests (min_version, wait) and answers (a v1::WeightsHeader, or
// an error) travel through the store too, and the buckets go over NCCL from
// device buffers on a dedicated stream. Communicators are non-blocking and
// every wait polls against a deadline; a communicator that misses one is
// aborted (ncclCommAbort), never waited on forever.
//
// The Debian LibTorch is CPU-only, so the staged buckets live in host
// memory: the publisher copies a version to the device once (cached per
// version), the receiver copies what arrived back to host buckets, checks
// them and loads `dst` (any device LibTorch has) all-or-nothing. Stats:
// Publish gather = packing, transfer = checksumming and staging; Receive
// transfer = from the answer's arrival to the last bucket on the host and
// verified, load = copying into dst.

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "weightsync/transport.h"

namespace trellis::weightsync {

class TransportRegistry;

// OK when CUDA reports a usable device; otherwise FailedPrecondition
// saying why (no device, no driver). Tests skip on it.
[[nodiscard]] absl::Status NcclAvailable();

// Read bucket_bytes, host, port, num_receivers, connect_timeout and
// cuda_device; a receiver, receiver_index too. InvalidArgument naming a
// bad field.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Publisher>> NewNcclPublisher(
    const TransportOptions& options);
[[nodiscard]] absl::StatusOr<std::unique_ptr<Receiver>> NewNcclReceiver(
    const TransportOptions& options);

// Registers "nccl" (the two constructors above).
[[nodiscard]] absl::Status RegisterNcclTransport(TransportRegistry& registry);

}  // namespace trellis::weightsync

#endif  // TRELLIS_WEIGHTSYNC_NCCL_TRANSPORT_H_
