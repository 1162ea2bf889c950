#ifndef TRELLIS_COMM_TCP_STORE_H_
#define TRELLIS_COMM_TCP_STORE_H_

// The rendezvous store that every multi-process link shares (the gloo,
// nccl and cuda_ipc weight transports, the learner group): one side hosts
// the store (store_server.h) on the address it is given, the others reach
// it (store_client.h, a c10d::Store) within a deadline, presenting the
// job's secret.

#include <chrono>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace trellis::comm {

// At least 1 ms.
std::chrono::milliseconds ToMs(absl::Duration d);

// Returns OK once something accepts TCP connections at host:port, retrying
// until `deadline`; DeadlineExceeded after.
[[nodiscard]] absl::Status WaitForListener(const std::string& host, int port, absl::Time deadline);

// Hosts (`server`: listening on host:port only, serving the clients that
// present `secret`) or reaches the store at host:port, presenting
// `secret`; the client's operations time out after `timeout`. An empty
// secret is an insecure job's (every client served). Unavailable naming
// the address when it cannot be hosted or reached, Unauthenticated when
// the store refuses the secret.
[[nodiscard]] absl::StatusOr<c10::intrusive_ptr<c10d::Store>> ConnectStore(
    const std::string& host, int port, bool server, absl::Duration timeout,
    const std::string& secret);

// A TCP port on `host` that was free when asked: a random one from
// kLowestPickedPort up to the kernel's ephemeral range (which outgoing
// connections draw from, so a port there is soon anyone's), else one the
// kernel picks (bind to port 0). Another process may still take it before
// the caller binds it.
inline constexpr int kLowestPickedPort = 20000;
[[nodiscard]] absl::StatusOr<int> PickFreeTcpPort(const std::string& host = "127.0.0.1");

}  // namespace trellis::comm

#endif  // TRELLIS_COMM_TCP_STORE_H_
