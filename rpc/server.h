#ifndef TRELLIS_RPC_SERVER_H_
#define TRELLIS_RPC_SERVER_H_

// Starting a gRPC server the way every Trellis service does: on a given
// host:port (port 0 picks a free one, reported back), with the
// grpc.health.v1 health service and server reflection, message-size limits,
// keepalive, and the job's secret checked on every call (rpc/auth.h).

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/server.h>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rpc/auth.h"

namespace grpc {
class Service;
}

namespace trellis::rpc {

class CallStats;

// Largest message a Trellis server or channel accepts.
inline constexpr int kMaxMessageBytes = 256 << 20;
// How long a server waits for a silent client's keepalive answer before it
// drops the connection: a client process that is stopped, not dead.
inline constexpr int kServerStallLimitMs = 600000;

struct ServerOptions {
  // The host other machines reach this one by (a name or an address);
  // empty: the listen host. A wildcard listen host (0.0.0.0, ::, [::])
  // names no machine, so it needs `advertise`.
  std::string advertise;
  // When set (not owned; it must outlive the server), every call answered
  // is counted and timed there.
  CallStats* stats = nullptr;
  // Who may call: with a secret, every call but the health service's needs
  // it, and gets UNAUTHENTICATED without (before any handler runs).
  JobSecret secret = ProcessSecret();
  // A request message larger than this is refused by gRPC
  // (RESOURCE_EXHAUSTED) before any handler runs; a role's server passes
  // its limit (config/request_limits.h MaxRequestBytes).
  int max_receive_bytes = kMaxMessageBytes;
};

class Server {
 public:
  // Binds `listen` ("host:port"; port 0 picks a free one) and serves
  // `services` (not owned; they must outlive the server). Health reports
  // NOT_SERVING for every service until SetServing(true). InvalidArgument
  // for a wildcard listen host without options.advertise.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Server>> Start(
      const std::string& listen, const std::vector<grpc::Service*>& services,
      const ServerOptions& options = ServerOptions());
  ~Server();

  // "host:port" that callers dial: the advertised host (or the listen host)
  // with the port actually bound.
  const std::string& address() const { return address_; }
  int port() const { return port_; }

  // Health status of every service (and of the server as a whole, "").
  void SetServing(bool serving);

  // Stops accepting calls; calls in flight get `grace` to finish, then are
  // cancelled. Idempotent.
  void Shutdown(absl::Duration grace = absl::Seconds(2));
  // Blocks until Shutdown.
  void Wait();

 private:
  Server(std::unique_ptr<grpc::Server> server, std::string address, int port);
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  int port_;
};

}  // namespace trellis::rpc

#endif  // TRELLIS_RPC_SERVER_H_
