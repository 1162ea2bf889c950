#include "comm/store_wire.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace trellis::comm::store_wire {
namespace {

void PutLittleEndian(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t GetLittleEndian(absl::string_view in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<uint8_t>(in[i])} << (8 * i);
  return v;
}

// Waits until `fd` is ready for `events` or `deadline` passes.
absl::Status AwaitReady(int fd, short events, absl::Time deadline) {
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return absl::DeadlineExceededError("timed out");
    pollfd p{fd, events, 0};
    const int64_t ms = deadline == absl::InfiniteFuture()
                           ? -1
                           : std::clamp<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1, 60000);
    const int rc = poll(&p, 1, static_cast<int>(ms));
    if (rc > 0) return absl::OkStatus();
    if (rc < 0 && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat("poll: ", std::strerror(errno)));
    }
  }
}

absl::Status SendAll(int fd, absl::string_view data, absl::Time deadline) {
  while (!data.empty()) {
    if (absl::Status s = AwaitReady(fd, POLLOUT, deadline); !s.ok()) return s;
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n <= 0) return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status ReceiveAll(int fd, char* out, size_t size, absl::Time deadline) {
  while (size > 0) {
    if (absl::Status s = AwaitReady(fd, POLLIN, deadline); !s.ok()) return s;
    const ssize_t n = recv(fd, out, size, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n == 0) return absl::UnavailableError("the peer closed the connection");
    if (n < 0) return absl::UnavailableError(absl::StrCat("recv: ", std::strerror(errno)));
    out += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

Writer& Writer::Byte(uint8_t b) {
  body_.push_back(static_cast<char>(b));
  return *this;
}

Writer& Writer::Int(int64_t v) {
  PutLittleEndian(static_cast<uint64_t>(v), 8, &body_);
  return *this;
}

Writer& Writer::Bytes(absl::string_view s) {
  PutLittleEndian(s.size(), 4, &body_);
  body_.append(s.data(), s.size());
  return *this;
}

Writer& Writer::Strings(const std::vector<std::string>& s) {
  Int(static_cast<int64_t>(s.size()));
  for (const std::string& one : s) Bytes(one);
  return *this;
}

bool Reader::Byte(uint8_t* b) {
  if (rest_.empty()) return false;
  *b = static_cast<uint8_t>(rest_[0]);
  rest_.remove_prefix(1);
  return true;
}

bool Reader::Int(int64_t* v) {
  if (rest_.size() < 8) {
    rest_ = {};
    return false;
  }
  *v = static_cast<int64_t>(GetLittleEndian(rest_, 8));
  rest_.remove_prefix(8);
  return true;
}

bool Reader::Bytes(std::string* s) {
  if (rest_.size() < 4 || rest_.size() - 4 < GetLittleEndian(rest_, 4)) {
    rest_ = {};
    return false;
  }
  const size_t n = GetLittleEndian(rest_, 4);
  s->assign(rest_.data() + 4, n);
  rest_.remove_prefix(4 + n);
  return true;
}

bool Reader::Strings(std::vector<std::string>* s) {
  int64_t n = 0;
  // Each string takes at least its 4-byte length.
  if (!Int(&n) || n < 0 || static_cast<uint64_t>(n) > rest_.size() / 4) {
    rest_ = {};
    return false;
  }
  s->resize(static_cast<size_t>(n));
  for (std::string& one : *s) {
    if (!Bytes(&one)) return false;
  }
  return true;
}

bool SameSecret(absl::string_view a, absl::string_view b) {
  // Every byte of `a` is compared, whatever differs first.
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < a.size(); ++i) {
    const char other = b.empty() ? '\0' : b[i % b.size()];
    diff |= static_cast<unsigned char>(a[i] ^ other);
  }
  return diff == 0;
}

std::string HandshakeBody(absl::string_view secret) {
  return Writer().Bytes(kHandshakeTag).Bytes(secret).body();
}

absl::Status SendFrame(int fd, absl::string_view body, absl::Time deadline) {
  std::string frame;
  PutLittleEndian(body.size(), 4, &frame);
  frame.append(body.data(), body.size());
  return SendAll(fd, frame, deadline);
}

absl::StatusOr<std::string> ReceiveFrame(int fd, uint32_t max_bytes, absl::Time deadline) {
  char header[4];
  if (absl::Status s = ReceiveAll(fd, header, sizeof(header), deadline); !s.ok()) return s;
  const uint64_t size = GetLittleEndian(absl::string_view(header, sizeof(header)), 4);
  if (size > max_bytes) {
    return absl::UnavailableError(
        absl::StrCat("a frame of ", size, " bytes (at most ", max_bytes, ")"));
  }
  std::string body(size, '\0');
  if (absl::Status s = ReceiveAll(fd, body.data(), body.size(), deadline); !s.ok()) return s;
  return body;
}

}  // namespace trellis::comm::store_wire
