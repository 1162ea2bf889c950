#ifndef TRELLIS_WEIGHTSYNC_TCP_TRANSPORT_H_
#define TRELLIS_WEIGHTSYNC_TCP_TRANSPORT_H_

// Weights over plain TCP sockets (CPU tensors): the gloo transport's
// protocol (gloo_transport.h: pull-based, one receiver slot per actor,
// versions streamed while packed or sent in place, buckets checksummed at
// both ends) on one socket per slot, written and read by the slot's own
// thread with no framing per message. A segment of rows apart goes out as
// one sendmsg over the rows where they lie (no gather), and a receiver
// reads each segment straight into its bucket and checksums it while it is
// in cache: on loopback this moves a version at close to the speed of bare
// sockets (bench/reshard_bench).
//
// The publisher hosts the rendezvous store (comm/tcp_store.h) at
// host:port, serving only clients with options.secret, and a data listener
// on a port the kernel picks, published in the store. A receiver proves it
// passed the store's check before its data connection is served: it draws
// a random token, sets it in the store under its slot and generation, and
// presents it in the connection's hello; the publisher serves a connection
// only when the token matches, and a slot's newer connection replaces its
// older one. Every wait is bounded as the gloo transport's.
//
// Publish reports gather = packing, transfer = checksumming and staging;
// Receive reports transfer = from the header's arrival to the last bucket
// received and verified, load = copying into dst. Fault injection:
// internal/inprocess_testing.h works on the publisher.

#include <memory>

#include "absl/status/statusor.h"
#include "weightsync/transport.h"

namespace trellis::weightsync {

// Reads bucket_bytes, host, port, num_receivers, connect_timeout and
// secret; hosts the store and the data listener on host (Unavailable if
// either cannot be bound) and serves every receiver slot. Destruction stops
// serving within a few seconds even if a receiver hangs. InvalidArgument
// naming a bad field.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Publisher>> NewTcpPublisher(
    const TransportOptions& options);

// Receiver slot `options.receiver_index`; reads host, port, num_receivers,
// connect_timeout and secret too. Nothing connects until the first
// Receive. InvalidArgument naming a bad field.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Receiver>> NewTcpReceiver(
    const TransportOptions& options);

}  // namespace trellis::weightsync

#endif  // TRELLIS_WEIGHTSYNC_TCP_TRANSPORT_H_
