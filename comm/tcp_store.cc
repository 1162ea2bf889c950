#include "comm/tcp_store.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/dial.h"
#include "comm/store_client.h"
#include "comm/store_server.h"

namespace trellis::comm {

std::chrono::milliseconds ToMs(absl::Duration d) {
  return std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

absl::Status WaitForListener(const std::string& host, int port, absl::Time deadline) {
  absl::StatusOr<int> fd = DialTcp(host, port, deadline);
  if (!fd.ok()) {
    return absl::DeadlineExceededError(
        absl::StrCat("nothing listens at ", host, ":", port, ": ", fd.status().message()));
  }
  close(*fd);
  return absl::OkStatus();
}

absl::StatusOr<c10::intrusive_ptr<c10d::Store>> ConnectStore(const std::string& host, int port,
                                                             bool server, absl::Duration timeout,
                                                             const std::string& secret) {
  std::shared_ptr<StoreServer> hosted;
  if (server) {
    absl::StatusOr<std::unique_ptr<StoreServer>> started = StoreServer::Start(host, port, secret);
    if (!started.ok()) return started.status();
    hosted = *std::move(started);
  }
  absl::StatusOr<c10::intrusive_ptr<StoreClient>> client =
      StoreClient::Connect({host, port, secret}, timeout, std::move(hosted));
  if (!client.ok()) return client.status();
  return c10::intrusive_ptr<c10d::Store>(*std::move(client));
}

namespace {

// The port `fd` is bound to.
int BoundPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
  return addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                    : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

// Whether a listening socket could bind `address` with `port` now (0: any;
// the port it got goes to *got).
bool CanBind(const addrinfo& a, int port, int* got, std::string* error) {
  const int fd = socket(a.ai_family, a.ai_socktype, a.ai_protocol);
  if (fd < 0) return false;
  sockaddr_storage addr{};
  std::memcpy(&addr, a.ai_addr, a.ai_addrlen);
  if (addr.ss_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port = htons(static_cast<uint16_t>(port));
  } else {
    reinterpret_cast<sockaddr_in*>(&addr)->sin_port = htons(static_cast<uint16_t>(port));
  }
  const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&addr), a.ai_addrlen) == 0;
  if (bound) *got = BoundPort(fd);
  if (!bound) *error = std::strerror(errno);
  close(fd);
  return bound && *got > 0;
}

// The lowest port the kernel hands to outgoing connections
// (/proc/sys/net/ipv4/ip_local_port_range); 32768 where unreadable.
int EphemeralLow() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  return in >> low && low > kLowestPickedPort + 1000 ? low : 32768;
}

}  // namespace

absl::StatusOr<int> PickFreeTcpPort(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), "0", &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("PickFreeTcpPort: cannot resolve ", host, ": ", gai_strerror(rc)));
  }
  std::string error = "no address";
  int got = 0;
  // Below the ephemeral range first: a port the kernel picks there can go
  // to any outgoing connection (another process's) before the caller binds.
  std::random_device entropy;
  std::uniform_int_distribution<int> below(kLowestPickedPort, EphemeralLow() - 1);
  for (int attempt = 0; attempt < 64 && got == 0; ++attempt) {
    if (!CanBind(*found, below(entropy), &got, &error)) got = 0;
  }
  for (addrinfo* a = found; a != nullptr && got == 0; a = a->ai_next) {
    if (!CanBind(*a, 0, &got, &error)) got = 0;
  }
  freeaddrinfo(found);
  if (got > 0) return got;
  return absl::UnavailableError(
      absl::StrCat("PickFreeTcpPort: cannot bind on ", host, ": ", error));
}

}  // namespace trellis::comm
