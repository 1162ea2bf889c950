#ifndef TRELLIS_WEIGHTSYNC_GLOO_TRANSPORT_H_
#define TRELLIS_WEIGHTSYNC_GLOO_TRANSPORT_H_

// Weights over TCP through c10d's ProcessGroupGloo (CPU tensors).
//
// One sender (the learner) and `num_receivers` receiver slots (the actors).
// The sender hosts a c10d::TCPStore at host:port; each receiver slot k gets
// its own two-rank ProcessGroupGloo (store prefix "pair/k/<generation>"), so
// a dead or slow receiver never holds up another. Pull-based like the
// in-process transport: Publish packs, checksums and stages the newest
// version and returns without waiting for anyone; a receiver's Receive
// sends its minimum version to its slot's serving thread on the sender,
// which answers with the newest staged version >= that minimum (header with
// manifest and checksums, then every bucket, all posted at once so that the
// receiver checksums bucket i while bucket i+1 is on the wire).
//
// A receiver connects lazily, on its first Receive, and reconnects (a new
// generation) after any failure. Every wait is bounded: a receiver whose
// sender is gone or never came up gets DeadlineExceeded or Unavailable by
// its timeout (plus at most ~0.5 s), and the sender drops a slot whose
// receiver went away and serves it again when the receiver comes back.
//
// Publish reports gather = packing, transfer = checksumming and staging;
// Receive reports transfer = from the header's arrival to the last bucket
// received and verified, load = copying into dst. Fault injection:
// internal/inprocess_testing.h works on the sending end.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "weightsync/transport.h"

namespace trellis::weightsync {

struct GlooEndpoint {
  // The sender's address: its TCPStore and gloo device listen here.
  std::string host = "127.0.0.1";
  int port = 0;  // The sender's TCPStore port: required (PickFreeTcpPort).
  int num_receivers = 1;
  int receiver_index = -1;  // 0..num_receivers-1 on a receiver; -1: sender.
  // Bounds connecting to the store and each pair's rendezvous.
  absl::Duration connect_timeout = absl::Seconds(30);
  // The address a receiver's gloo device binds (the sender connects to it).
  // Empty: `host` when that is a loopback address, else this machine's
  // hostname as resolved by gloo.
  std::string local_host;
};

// The sending end: hosts the TCPStore (returns Unavailable if host:port
// cannot be bound) and serves every receiver slot. Publish may be called
// from any thread; destruction stops serving and returns within a few
// seconds even if a receiver hangs.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Transport>> NewGlooSender(
    const GlooEndpoint& endpoint, TransportOptions options = {});

// Receiver slot `endpoint.receiver_index`. Nothing connects until the first
// Receive. Publish returns Unimplemented. Receive calls are serialized.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Transport>> NewGlooReceiver(
    const GlooEndpoint& endpoint, TransportOptions options = {});

// A TCP port on `host` that was free when asked (bind to port 0, read it,
// close). Another process may take it before the caller binds it.
[[nodiscard]] absl::StatusOr<int> PickFreeTcpPort(
    const std::string& host = "127.0.0.1");

}  // namespace trellis::weightsync

#endif  // TRELLIS_WEIGHTSYNC_GLOO_TRANSPORT_H_
