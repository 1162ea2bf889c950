#include "comm/store_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/store_wire.h"

namespace trellis::comm {
namespace {

using store_wire::Op;
using store_wire::Reader;
using store_wire::Reply;
using store_wire::Writer;

std::vector<uint8_t> AsBytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string AsString(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

// A socket listening on the first address of host:port that binds.
absl::StatusOr<int> Listen(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string where = absl::StrCat("comm: hosting the rendezvous store at ", host, ":", port);
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(absl::StrCat(where, ": cannot resolve: ", gai_strerror(rc)));
  }
  std::string error = "no address";
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0) {
      error = std::strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) return absl::UnavailableError(absl::StrCat(where, ": ", error));
  return fd;
}

// Whether `hello` is the handshake with `secret` (any secret when it is
// empty).
bool Authenticates(const std::string& hello, const std::string& secret) {
  Reader r(hello);
  std::string tag;
  std::string offered;
  const bool formed =
      r.Bytes(&tag) && r.Bytes(&offered) && r.done() && tag == store_wire::kHandshakeTag;
  return formed && (secret.empty() || store_wire::SameSecret(offered, secret));
}

}  // namespace

absl::StatusOr<std::unique_ptr<StoreServer>> StoreServer::Start(const std::string& host, int port,
                                                                std::string secret) {
  absl::StatusOr<int> fd = Listen(host, port);
  if (!fd.ok()) return fd.status();
  return std::unique_ptr<StoreServer>(new StoreServer(*fd, std::move(secret)));
}

StoreServer::StoreServer(int listen_fd, std::string secret)
    : listen_fd_(listen_fd), secret_(std::move(secret)) {
  acceptor_ = std::thread([this] { Accept(); });
}

StoreServer::~StoreServer() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  // Wakes accept() (Linux returns EINVAL on a shut listening socket).
  shutdown(listen_fd_, SHUT_RDWR);
  acceptor_.join();
  close(listen_fd_);
  std::list<std::unique_ptr<Connection>> connections;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& c : connections_) shutdown(c->fd, SHUT_RDWR);
    connections.swap(connections_);
  }
  for (const auto& c : connections) {
    c->thread.join();
    close(c->fd);
  }
}

void StoreServer::Accept() {
  while (true) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      if (fd >= 0) close(fd);
      return;
    }
    for (auto it = connections_.begin(); it != connections_.end();) {
      if (!(*it)->done) {
        ++it;
        continue;
      }
      (*it)->thread.join();
      close((*it)->fd);
      it = connections_.erase(it);
    }
    if (fd < 0) {
      // Out of descriptors or an aborted connection: try again shortly.
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Milliseconds(10));
      continue;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto c = std::make_unique<Connection>();
    Connection* raw = c.get();
    raw->fd = fd;
    connections_.push_back(std::move(c));
    raw->thread = std::thread([this, raw] { Serve(raw); });
  }
}

void StoreServer::Serve(Connection* c) {
  // Before the secret: one small frame, within kHandshakeTimeout.
  absl::StatusOr<std::string> hello = store_wire::ReceiveFrame(
      c->fd, store_wire::kMaxHandshakeBytes, absl::Now() + kHandshakeTimeout);
  if (hello.ok() && Authenticates(*hello, secret_) &&
      store_wire::SendFrame(c->fd, store_wire::kHandshakeOk, absl::InfiniteFuture()).ok()) {
    while (true) {
      absl::StatusOr<std::string> request =
          store_wire::ReceiveFrame(c->fd, store_wire::kMaxFrameBytes, absl::InfiniteFuture());
      if (!request.ok() || !Answer(c->fd, *request)) break;
    }
  }
  // The descriptor stays open until the thread is joined, so that a
  // shutdown() from the destructor never reaches a reused descriptor.
  shutdown(c->fd, SHUT_RDWR);
  c->done = true;
}

bool StoreServer::AwaitKeys(const std::vector<std::string>& keys, absl::Time deadline) {
  auto ready = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (stopping_) return true;
    for (const std::string& k : keys) {
      if (!keys_.contains(k)) return false;
    }
    return true;
  };
  mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  return !stopping_ && ready();
}

bool StoreServer::Answer(int fd, const std::string& request) {
  Reader r(request);
  uint8_t op = 0;
  std::string key;
  std::vector<std::string> keys;
  std::string a;
  std::string b;
  int64_t n = 0;
  Writer out;
  if (!r.Byte(&op)) return false;
  switch (static_cast<Op>(op)) {
    case Op::kSet: {
      if (!r.Bytes(&key) || !r.Bytes(&a) || !r.done()) return false;
      absl::MutexLock lock(&mu_);
      keys_[key] = AsBytes(a);
      out.Byte(static_cast<uint8_t>(Reply::kOk));
      break;
    }
    case Op::kGet: {
      if (!r.Bytes(&key) || !r.Int(&n) || !r.done()) return false;
      absl::MutexLock lock(&mu_);
      if (AwaitKeys({key}, absl::Now() + absl::Milliseconds(std::max<int64_t>(n, 0)))) {
        out.Byte(static_cast<uint8_t>(Reply::kOk)).Bytes(AsString(keys_[key]));
      } else {
        out.Byte(static_cast<uint8_t>(Reply::kTimedOut));
      }
      break;
    }
    case Op::kAdd: {
      if (!r.Bytes(&key) || !r.Int(&n) || !r.done()) return false;
      absl::MutexLock lock(&mu_);
      std::vector<uint8_t>& value = keys_[key];
      int64_t sum = 0;
      // As c10d's stores keep it: the decimal text of the number.
      if (!value.empty() && !absl::SimpleAtoi(AsString(value), &sum)) {
        out.Byte(static_cast<uint8_t>(Reply::kBadRequest));
        break;
      }
      sum += n;
      value = AsBytes(std::to_string(sum));
      out.Byte(static_cast<uint8_t>(Reply::kOk)).Int(sum);
      break;
    }
    case Op::kCompareSet: {
      if (!r.Bytes(&key) || !r.Bytes(&a) || !r.Bytes(&b) || !r.done()) return false;
      absl::MutexLock lock(&mu_);
      auto it = keys_.find(key);
      // c10d's rule: a missing key is set only when `a` (expected) is
      // empty; the answer is the value now held (`a` when still missing).
      if (it == keys_.end()) {
        if (a.empty()) keys_[key] = AsBytes(b);
        out.Byte(static_cast<uint8_t>(Reply::kOk)).Bytes(a.empty() ? b : a);
      } else {
        if (AsString(it->second) == a) it->second = AsBytes(b);
        out.Byte(static_cast<uint8_t>(Reply::kOk)).Bytes(AsString(it->second));
      }
      break;
    }
    case Op::kCheck:
    case Op::kWait: {
      const bool wait = static_cast<Op>(op) == Op::kWait;
      if (!r.Strings(&keys) || (wait && !r.Int(&n)) || !r.done()) return false;
      absl::MutexLock lock(&mu_);
      const absl::Time deadline =
          wait ? absl::Now() + absl::Milliseconds(std::max<int64_t>(n, 0)) : absl::InfinitePast();
      const bool all = AwaitKeys(keys, deadline);
      if (wait) {
        out.Byte(static_cast<uint8_t>(all ? Reply::kOk : Reply::kTimedOut));
      } else {
        out.Byte(static_cast<uint8_t>(Reply::kOk)).Int(all ? 1 : 0);
      }
      break;
    }
    case Op::kDelete: {
      if (!r.Bytes(&key) || !r.done()) return false;
      absl::MutexLock lock(&mu_);
      out.Byte(static_cast<uint8_t>(Reply::kOk)).Int(keys_.erase(key) > 0 ? 1 : 0);
      break;
    }
    case Op::kNumKeys: {
      if (!r.done()) return false;
      absl::MutexLock lock(&mu_);
      out.Byte(static_cast<uint8_t>(Reply::kOk)).Int(static_cast<int64_t>(keys_.size()));
      break;
    }
    default: return false;
  }
  return store_wire::SendFrame(fd, out.body(), absl::InfiniteFuture()).ok();
}

}  // namespace trellis::comm
