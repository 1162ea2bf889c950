#include "comm/tcp_store.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace trellis::comm {

std::chrono::milliseconds ToMs(absl::Duration d) {
  return std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

absl::Status WaitForListener(const std::string& host, int port, absl::Time deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", host, ": ", gai_strerror(rc)));
  }
  std::string error = "no address";
  while (true) {
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (fd < 0) continue;
      const bool ok = connect(fd, a->ai_addr, a->ai_addrlen) == 0;
      if (!ok) error = std::strerror(errno);
      close(fd);
      if (ok) {
        freeaddrinfo(found);
        return absl::OkStatus();
      }
    }
    if (absl::Now() + absl::Milliseconds(20) >= deadline) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  freeaddrinfo(found);
  return absl::DeadlineExceededError(
      absl::StrCat("nothing listens at ", host, ":", port, " (", error, ")"));
}

absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>> ConnectStore(const std::string& host, int port,
                                                                bool server,
                                                                absl::Duration timeout) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(port);
  opts.isServer = server;
  opts.waitWorkers = false;
  opts.timeout = std::max(ToMs(timeout), std::chrono::milliseconds(1000));
  try {
    return c10::make_intrusive<c10d::TCPStore>(host, opts);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("comm: ", server ? "hosting" : "reaching",
                                               " the rendezvous store at ", host, ":", port, ": ",
                                               e.what()));
  }
}

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
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      close(fd);
      freeaddrinfo(found);
      const int port = addr.ss_family == AF_INET6
                           ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                           : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
      return port;
    }
    error = std::strerror(errno);
    close(fd);
  }
  freeaddrinfo(found);
  return absl::UnavailableError(
      absl::StrCat("PickFreeTcpPort: cannot bind on ", host, ": ", error));
}

}  // namespace trellis::comm
