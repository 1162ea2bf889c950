#ifndef TRELLIS_WEIGHTSYNC_INTERNAL_TCP_STORE_H_
#define TRELLIS_WEIGHTSYNC_INTERNAL_TCP_STORE_H_

// The c10d::TCPStore rendezvous that the gloo and nccl transports share:
// the sender hosts the store, receivers reach it within a deadline.

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace trellis::weightsync::internal {

// At least 1 ms.
std::chrono::milliseconds ToMs(absl::Duration d);

// Returns OK once something accepts TCP connections at host:port, retrying
// until `deadline`; DeadlineExceeded after. c10d's own connect timeout
// counts whole seconds (a shorter one fails at once), so a receiver probes
// with this before it builds its store client.
[[nodiscard]] absl::Status WaitForListener(const std::string& host, int port,
                                           absl::Time deadline);

// Hosts (`server`) or reaches the store at host:port; its operations time
// out after `timeout` (at least 1 s). Unavailable on failure, naming the
// address.
[[nodiscard]] absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>> ConnectStore(
    const std::string& host, int port, bool server, absl::Duration timeout);

// PickFreeTcpPort (gloo_transport.h, nccl_transport.h).
[[nodiscard]] absl::StatusOr<int> FreeTcpPort(const std::string& host);

}  // namespace trellis::weightsync::internal

#endif  // TRELLIS_WEIGHTSYNC_INTERNAL_TCP_STORE_H_
