#ifndef TRELLIS_COMM_TCP_STORE_H_
#define TRELLIS_COMM_TCP_STORE_H_

// The c10d::TCPStore rendezvous that every multi-process link shares (the
// gloo and nccl weight transports, the learner group): one side hosts the
// store, the others reach it within a deadline.

#include <chrono>
#include <string>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace trellis::comm {

// At least 1 ms.
std::chrono::milliseconds ToMs(absl::Duration d);

// Returns OK once something accepts TCP connections at host:port, retrying
// until `deadline`; DeadlineExceeded after. c10d's own connect timeout
// counts whole seconds (a shorter one fails at once), so a client probes
// with this before it builds its store client.
[[nodiscard]] absl::Status WaitForListener(const std::string& host, int port, absl::Time deadline);

// Hosts (`server`) or reaches the store at host:port; its operations time
// out after `timeout` (at least 1 s). Unavailable on failure, naming the
// address.
[[nodiscard]] absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>> ConnectStore(
    const std::string& host, int port, bool server, absl::Duration timeout);

// A TCP port on `host` that was free when asked: a random one from
// kLowestPickedPort up to the kernel's ephemeral range (which outgoing
// connections draw from, so a port there is soon anyone's), else one the
// kernel picks (bind to port 0). Another process may still take it before
// the caller binds it.
inline constexpr int kLowestPickedPort = 20000;
[[nodiscard]] absl::StatusOr<int> PickFreeTcpPort(const std::string& host = "127.0.0.1");

}  // namespace trellis::comm

#endif  // TRELLIS_COMM_TCP_STORE_H_
