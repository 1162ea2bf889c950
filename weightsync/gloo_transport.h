#ifndef TRELLIS_WEIGHTSYNC_GLOO_TRANSPORT_H_
#define TRELLIS_WEIGHTSYNC_GLOO_TRANSPORT_H_

// Weights over TCP through c10d's ProcessGroupGloo (CPU tensors).
//
// One publisher (the learner) and `num_receivers` receiver slots (the
// actors). The publisher hosts the rendezvous store (comm/tcp_store.h)
// at host:port, serving only clients with options.secret; each
// receiver slot k gets its own two-rank ProcessGroupGloo (store prefix
// "pair/k/<generation>"), so a dead or slow receiver never holds up
// another. Pull-based like the in-process transport: Publish packs,
// checksums and stages the newest version and returns without waiting for
// anyone; a receiver's Receive sends its minimum version to its slot's
// serving thread on the publisher, which answers with the newest staged
// version >= that minimum (header with the manifest, then every bucket,
// then the buckets' checksums), so that the receiver checksums bucket i
// while bucket i+1 is on the wire. A receiver that asks while its version
// is being packed gets each bucket as soon as it is packed: sending
// overlaps packing. When every receiver slot already waits for the version
// Publish makes, nothing is packed: each slot's thread checksums the
// tensors' bytes where they lie and sends them from there (rows gathered
// through a cache-sized buffer), and Publish returns once they are sent,
// so the caller may change its tensors at once; such a version is not
// kept for a receiver that asks for it later (it gets the next).
//
// A receiver connects lazily, on its first Receive, and reconnects (a new
// generation) after any failure. Every wait is bounded: a receiver whose
// publisher is gone or never came up gets DeadlineExceeded or Unavailable
// by its timeout (plus at most ~0.5 s), and the publisher drops a slot
// whose receiver went away and serves it again when the receiver comes
// back.
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
// secret; hosts the store (Unavailable if host:port cannot be bound) and serves every
// receiver slot. Destruction stops serving and returns within a few
// seconds even if a receiver hangs. InvalidArgument naming a bad field.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Publisher>> NewGlooPublisher(
    const TransportOptions& options);

// Receiver slot `options.receiver_index`; reads host, port, num_receivers,
// connect_timeout and local_host too. Nothing connects until the first
// Receive. InvalidArgument naming a bad field.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Receiver>> NewGlooReceiver(
    const TransportOptions& options);

}  // namespace trellis::weightsync

#endif  // TRELLIS_WEIGHTSYNC_GLOO_TRANSPORT_H_
