#ifndef TRELLIS_WEIGHTSYNC_INTERNAL_TCP_PROTOCOL_H_
#define TRELLIS_WEIGHTSYNC_INTERNAL_TCP_PROTOCOL_H_

// What both ends of the tcp transport (tcp_transport.h) agree on: store
// keys, the hello, the segment size and the graces.

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace trellis::weightsync::internal::tcp {

// Starts every error of the transport.
inline constexpr char kName[] = "weightsync tcp";

// The store key holding the port of the publisher's data listener.
inline constexpr char kDataPortKey[] = "tcp/data_port";

// The store key holding the connection generation of receiver slot `slot`.
inline std::string GenerationKey(int slot) { return absl::StrCat("slot/", slot, "/generation"); }

// The store key holding the token that generation `generation` of slot
// `slot` presents on its data connection.
inline std::string TokenKey(int slot, int64_t generation) {
  return absl::StrCat("slot/", slot, "/token/", generation);
}

// A data connection opens with int64 [slot, generation, token0, token1].
inline constexpr int kHelloWords = 4;

// The sender checksums and writes the buckets' bytes in segments of at
// most this many bytes (wire.h Segments), each while still in cache; the
// receiver reads and checksums them in pieces of at most kReadBytes, woken
// once a piece is buffered (ReceiveLowWater). The stream has no framing:
// both ends cut it as they like.
inline constexpr int64_t kSegmentBytes = int64_t{1} << 20;
inline constexpr int64_t kReadBytes = int64_t{1} << 19;
inline constexpr int64_t kMaxHeaderBytes = int64_t{1} << 30;
// How long the publisher waits for a new connection's hello.
inline constexpr absl::Duration kHelloTimeout = absl::Seconds(5);
// How long past its timeout a receiver waits for the publisher's answer.
inline constexpr absl::Duration kAnswerGrace = absl::Milliseconds(500);
// How long the publisher's destructor waits for its threads.
inline constexpr absl::Duration kStopGrace = absl::Seconds(3);

}  // namespace trellis::weightsync::internal::tcp

#endif  // TRELLIS_WEIGHTSYNC_INTERNAL_TCP_PROTOCOL_H_
