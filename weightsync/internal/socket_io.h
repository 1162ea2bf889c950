#ifndef TRELLIS_WEIGHTSYNC_INTERNAL_SOCKET_IO_H_
#define TRELLIS_WEIGHTSYNC_INTERNAL_SOCKET_IO_H_

// Plain TCP sockets for the tcp weight transport (tcp_transport.h): listen,
// connect, and move whole buffers within a deadline. Every blocking call
// returns at least every kIoSlice (SO_RCVTIMEO/SO_SNDTIMEO), so that a wait
// checks its deadline and its `stop` flag; shutdown() from another thread
// ends it at once.

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace trellis::weightsync::internal {

inline constexpr absl::Duration kIoSlice = absl::Milliseconds(200);

// A socket descriptor, closed with its owner.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& other) noexcept : fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket();

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release();

 private:
  int fd_ = -1;
};

struct Listening {
  Socket socket;
  int port = 0;
};

// A listening socket on `host` at a port the kernel picks. Unavailable
// naming the host when it cannot be bound.
[[nodiscard]] absl::StatusOr<Listening> Listen(const std::string& host);

// The next connection to `listener`: an invalid Socket when none came
// within kIoSlice, Unavailable once the listener is shut down.
[[nodiscard]] absl::StatusOr<Socket> Accept(const Socket& listener);

// A connection to host:port by `deadline`; Unavailable naming it otherwise.
[[nodiscard]] absl::StatusOr<Socket> Connect(const std::string& host, int port,
                                             absl::Time deadline);

// Sets the slices and TCP_NODELAY on a connected socket.
[[nodiscard]] absl::Status Tune(const Socket& socket);

// Writes all of `iov[0..n)`, which it may advance. DeadlineExceeded naming
// `what` past `deadline`, Unavailable when the peer is gone, Cancelled once
// *stop is set.
[[nodiscard]] absl::Status SendAll(const Socket& socket, iovec* iov, int n, absl::Time deadline,
                                   const char* what, const std::atomic<bool>* stop = nullptr);
[[nodiscard]] absl::Status SendAll(const Socket& socket, const void* data, size_t n,
                                   absl::Time deadline, const char* what,
                                   const std::atomic<bool>* stop = nullptr);

// Reads exactly `n` bytes into `data`, as SendAll.
[[nodiscard]] absl::Status RecvAll(const Socket& socket, void* data, size_t n, absl::Time deadline,
                                   const char* what, const std::atomic<bool>* stop = nullptr);

// Batches a reader's wakeups over a stream of known length (SO_RCVLOWAT):
// a RecvAll blocked for the next `n` bytes is woken once that many are
// buffered rather than at every arriving packet. Never stalls the stream's
// tail: the mark is `n` only while at least 2n bytes of the stream are still
// to come (so that the bytes unread once a RecvAll copied part of its `n`
// can still reach it), else 1. The socket's mark is 1 again once this goes.
class ReceiveLowWater {
 public:
  ReceiveLowWater(const Socket& socket, int64_t stream_bytes)
      : socket_(socket), left_(stream_bytes) {}
  ReceiveLowWater(const ReceiveLowWater&) = delete;
  ReceiveLowWater& operator=(const ReceiveLowWater&) = delete;
  ~ReceiveLowWater();

  // Before a RecvAll of the stream's next `n` bytes.
  [[nodiscard]] absl::Status Next(int64_t n);

 private:
  absl::Status Set(int mark);

  const Socket& socket_;
  int64_t left_;
  int mark_ = 1;
};

}  // namespace trellis::weightsync::internal

#endif  // TRELLIS_WEIGHTSYNC_INTERNAL_SOCKET_IO_H_
