#include "comm/dial.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace trellis::comm {

absl::StatusOr<int> DialTcp(const std::string& host, int port, absl::Time deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", host, ": ", gai_strerror(rc)));
  }
  std::string error = "no address";
  for (;;) {
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) {
        error = std::strerror(errno);
        continue;
      }
      // connect() gives up at SO_SNDTIMEO.
      const timeval tv =
          absl::ToTimeval(std::max(deadline - absl::Now(), absl::Milliseconds(100)));
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
      if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        freeaddrinfo(found);
        return fd;
      }
      error = std::strerror(errno);
      close(fd);
    }
    if (absl::Now() + absl::Milliseconds(20) >= deadline) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  freeaddrinfo(found);
  return absl::UnavailableError(
      absl::StrCat("cannot connect to ", host, ":", port, " (", error, ")"));
}

}  // namespace trellis::comm
