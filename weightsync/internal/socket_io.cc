#include "weightsync/internal/socket_io.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/dial.h"

namespace trellis::weightsync::internal {
namespace {

absl::Status Errno(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

bool Retry() { return errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK; }

// Why a transfer that must go on stops, if it does.
absl::Status Stopped(absl::Time deadline, const char* what, const std::atomic<bool>* stop) {
  if (stop != nullptr && stop->load()) return absl::CancelledError(absl::StrCat(what, ": stopped"));
  if (absl::Now() > deadline) {
    return absl::DeadlineExceededError(absl::StrCat("timed out on ", what));
  }
  return absl::OkStatus();
}

}  // namespace

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.release();
  }
  return *this;
}

Socket::~Socket() {
  if (fd_ >= 0) close(fd_);
}

int Socket::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

absl::StatusOr<Listening> Listen(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), "0", &hints, &found); rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", host, ": ", gai_strerror(rc)));
  }
  absl::Status error = absl::UnavailableError(absl::StrCat("no address for ", host));
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    Socket s(socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    if (!s.valid() || bind(s.fd(), a->ai_addr, a->ai_addrlen) != 0 || listen(s.fd(), 64) != 0 ||
        getsockname(s.fd(), reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
      error = Errno(absl::StrCat("listening on ", host));
      continue;
    }
    const timeval slice = absl::ToTimeval(kIoSlice);
    setsockopt(s.fd(), SOL_SOCKET, SO_RCVTIMEO, &slice, sizeof(slice));
    freeaddrinfo(found);
    const int port = bound.ss_family == AF_INET6
                         ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                         : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    return Listening{std::move(s), port};
  }
  freeaddrinfo(found);
  return error;
}

absl::StatusOr<Socket> Accept(const Socket& listener) {
  Socket s(accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC));
  if (s.valid()) return s;
  if (Retry()) return Socket();
  return Errno("accepting");
}

absl::StatusOr<Socket> Connect(const std::string& host, int port, absl::Time deadline) {
  absl::StatusOr<int> fd = comm::DialTcp(host, port, deadline);
  if (!fd.ok()) return fd.status();
  return Socket(*fd);
}

absl::Status Tune(const Socket& socket) {
  const timeval slice = absl::ToTimeval(kIoSlice);
  const int one = 1;
  if (setsockopt(socket.fd(), SOL_SOCKET, SO_RCVTIMEO, &slice, sizeof(slice)) != 0 ||
      setsockopt(socket.fd(), SOL_SOCKET, SO_SNDTIMEO, &slice, sizeof(slice)) != 0 ||
      setsockopt(socket.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    return Errno("setting socket options");
  }
  return absl::OkStatus();
}

absl::Status SendAll(const Socket& socket, iovec* iov, int n, absl::Time deadline, const char* what,
                     const std::atomic<bool>* stop) {
  while (n > 0) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(std::min(n, IOV_MAX));
    const ssize_t sent = sendmsg(socket.fd(), &msg, MSG_NOSIGNAL);
    if (sent < 0) {
      if (!Retry()) return Errno(absl::StrCat("sending ", what));
      if (absl::Status s = Stopped(deadline, what, stop); !s.ok()) return s;
      continue;
    }
    size_t left = static_cast<size_t>(sent);
    for (; n > 0 && left >= iov->iov_len; ++iov, --n) left -= iov->iov_len;
    if (n > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
    if (n > 0) {
      if (absl::Status s = Stopped(deadline, what, stop); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::Status SendAll(const Socket& socket, const void* data, size_t n, absl::Time deadline,
                     const char* what, const std::atomic<bool>* stop) {
  iovec iov{const_cast<void*>(data), n};
  return SendAll(socket, &iov, 1, deadline, what, stop);
}

absl::Status RecvAll(const Socket& socket, void* data, size_t n, absl::Time deadline,
                     const char* what, const std::atomic<bool>* stop) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t got = recv(socket.fd(), p, n, MSG_WAITALL);
    if (got == 0) return absl::UnavailableError(absl::StrCat("the peer closed during ", what));
    if (got < 0 && !Retry()) return Errno(absl::StrCat("receiving ", what));
    if (got > 0) {
      p += got;
      n -= static_cast<size_t>(got);
    }
    if (n > 0) {
      if (absl::Status s = Stopped(deadline, what, stop); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

ReceiveLowWater::~ReceiveLowWater() {
  if (mark_ != 1) Set(1).IgnoreError();
}

absl::Status ReceiveLowWater::Set(int mark) {
  if (setsockopt(socket_.fd(), SOL_SOCKET, SO_RCVLOWAT, &mark, sizeof(mark)) != 0) {
    return Errno("setting the receive low-water mark");
  }
  mark_ = mark;
  return absl::OkStatus();
}

absl::Status ReceiveLowWater::Next(int64_t n) {
  const int mark =
      n > 0 && left_ >= 2 * n && n <= std::numeric_limits<int>::max() ? static_cast<int>(n) : 1;
  left_ -= n;
  return mark == mark_ ? absl::OkStatus() : Set(mark);
}

}  // namespace trellis::weightsync::internal
