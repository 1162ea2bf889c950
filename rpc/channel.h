#ifndef TRELLIS_RPC_CHANNEL_H_
#define TRELLIS_RPC_CHANNEL_H_

// The client side of every Trellis call: channels with keepalive and the
// message-size limits of rpc/server.h that send the job's secret
// (rpc/auth.h) with every call, and unary calls that always carry a
// deadline and come back as absl::Status naming the callee.

#include <memory>
#include <string>
#include <string_view>

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rpc/auth.h"
#include "rpc/status.h"

namespace trellis::rpc {

struct HostPort {
  std::string host;
  int port = 0;
};
// "host:port" split at its last ':'. InvalidArgument naming `address` when
// there is no ':' or the port is not a number in 0..65535.
[[nodiscard]] absl::StatusOr<HostPort> SplitHostPort(const std::string& address);

// True for the hosts that mean "every interface" (0.0.0.0, ::, [::], and
// the empty host of ":port"): no other machine can dial them.
bool IsWildcardHost(const std::string& host);

// How long a channel waits for a silent peer's keepalive answer before its
// calls fail, unless told otherwise.
inline constexpr absl::Duration kDefaultStallLimit = absl::Seconds(5);

// A channel to "host:port"; it connects lazily. Calls in flight fail once
// the peer has left a keepalive ping unanswered for `stall_limit` (a
// stopped process answers again when it continues). Every call carries
// `secret` (nothing when insecure).
std::shared_ptr<grpc::Channel> NewChannel(const std::string& address,
                                          absl::Duration stall_limit = kDefaultStallLimit,
                                          const JobSecret& secret = ProcessSecret());

// Waits until the channel is connected; Unavailable naming `address` after
// `timeout`.
[[nodiscard]] absl::Status WaitConnected(grpc::Channel& channel, const std::string& address,
                                         absl::Duration timeout);

void SetDeadline(grpc::ClientContext& context, absl::Duration timeout);

// One unary call with a deadline of `timeout`; a failure's message starts
// with `what` (who was called, and which call).
template <typename Stub, typename Request, typename Response>
absl::StatusOr<Response> Call(Stub& stub,
                              grpc::Status (Stub::*method)(grpc::ClientContext*,
                                                           const Request&, Response*),
                              const Request& request, absl::Duration timeout,
                              std::string_view what) {
  grpc::ClientContext context;
  SetDeadline(context, timeout);
  Response response;
  grpc::Status status = (stub.*method)(&context, request, &response);
  if (!status.ok()) return FromGrpc(status, what);
  return response;
}

}  // namespace trellis::rpc

#endif  // TRELLIS_RPC_CHANNEL_H_
