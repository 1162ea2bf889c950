#ifndef TRELLIS_COMM_DIAL_H_
#define TRELLIS_COMM_DIAL_H_

// Opening a TCP connection within a deadline: the one connect loop under
// the rendezvous store's client (store_client.h), WaitForListener
// (tcp_store.h) and the tcp weight transport (weightsync/internal/socket_io.h).

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace trellis::comm {

// A connected socket (close-on-exec) to host:port, trying each of its
// addresses and retrying every 20 ms until `deadline` (each connect()
// bounded by what is left, at least 100 ms). Unavailable "cannot resolve
// HOST: ..." or "cannot connect to HOST:PORT (REASON)"; the caller owns the
// descriptor.
[[nodiscard]] absl::StatusOr<int> DialTcp(const std::string& host, int port, absl::Time deadline);

}  // namespace trellis::comm

#endif  // TRELLIS_COMM_DIAL_H_
