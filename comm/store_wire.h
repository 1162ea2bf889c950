#ifndef TRELLIS_COMM_STORE_WIRE_H_
#define TRELLIS_COMM_STORE_WIRE_H_

// The wire of the job's rendezvous store (store_server.h, store_client.h):
// length-prefixed frames over TCP, the handshake that carries the job's
// secret, and the encoding of requests and answers. Shared by both ends;
// not for use elsewhere.
//
// A frame: u32 length (little-endian), then that many bytes. The first
// frame a client sends is the handshake, kHandshakeTag then the secret;
// the server answers kHandshakeOk, or closes the connection without
// answering. Every later frame is a request (an Op byte and its fields)
// answered by one frame (a Reply byte and its fields). Strings go as a u32
// length and their bytes, integers as 8 little-endian bytes.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace trellis::comm::store_wire {

inline constexpr char kHandshakeTag[] = "trellis-store/1";
inline constexpr char kHandshakeOk[] = "ok";
// What a frame may hold: the handshake before the secret is known (an
// unauthenticated peer gets no more), and any frame after.
inline constexpr uint32_t kMaxHandshakeBytes = 4096;
inline constexpr uint32_t kMaxFrameBytes = 64u << 20;

enum class Op : uint8_t {
  kSet = 1,         // key, value
  kGet = 2,         // key, wait ms -> value
  kAdd = 3,         // key, i64 -> i64
  kCompareSet = 4,  // key, expected, desired -> value
  kCheck = 5,       // keys -> i64 (0 or 1)
  kDelete = 6,      // key -> i64 (0 or 1)
  kNumKeys = 7,     // -> i64
  kWait = 8,        // keys, wait ms
};

enum class Reply : uint8_t { kOk = 0, kTimedOut = 1, kBadRequest = 2 };

// Builds a frame's body.
class Writer {
 public:
  Writer& Byte(uint8_t b);
  Writer& Int(int64_t v);
  Writer& Bytes(absl::string_view s);
  Writer& Strings(const std::vector<std::string>& s);
  const std::string& body() const { return body_; }

 private:
  std::string body_;
};

// Reads a frame's body; each accessor returns false once the body is
// short (and from then on).
class Reader {
 public:
  explicit Reader(absl::string_view body) : rest_(body) {}
  bool Byte(uint8_t* b);
  bool Int(int64_t* v);
  bool Bytes(std::string* s);
  bool Strings(std::vector<std::string>* s);
  bool done() const { return rest_.empty(); }

 private:
  absl::string_view rest_;
};

// Whether `a` equals `b`, in time that depends on their lengths only.
bool SameSecret(absl::string_view a, absl::string_view b);

// The handshake frame's body for `secret`.
std::string HandshakeBody(absl::string_view secret);

// Sends one frame on `fd` by `deadline` (never raising SIGPIPE).
[[nodiscard]] absl::Status SendFrame(int fd, absl::string_view body, absl::Time deadline);
// Receives one frame of at most `max_bytes` by `deadline`. Unavailable
// when the peer closes or breaks the rule, DeadlineExceeded at the
// deadline.
[[nodiscard]] absl::StatusOr<std::string> ReceiveFrame(int fd, uint32_t max_bytes,
                                                       absl::Time deadline);

}  // namespace trellis::comm::store_wire

#endif  // TRELLIS_COMM_STORE_WIRE_H_
