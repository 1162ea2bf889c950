#ifndef TRELLIS_RPC_TESTING_IN_PROCESS_SERVER_H_
#define TRELLIS_RPC_TESTING_IN_PROCESS_SERVER_H_

// The gRPC bindings of the role conformance suites: a role's service
// served on 127.0.0.1:0 in the test's own process.

#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "rpc/server.h"

namespace trellis::rpc::testing {

// Serves `service` on 127.0.0.1:0. The server shuts down when the last copy
// of the returned pointer goes, and only then lets go of `keep` (the
// service and the engine it serves).
inline absl::StatusOr<std::shared_ptr<Server>> ServeInProcess(grpc::Service* service,
                                                              std::shared_ptr<void> keep) {
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start("127.0.0.1:0", {service});
  if (!server.ok()) return server.status();
  return std::shared_ptr<Server>(server->release(), [keep = std::move(keep)](Server* s) {
    s->Shutdown();
    delete s;
  });
}

// `a` and `b` kept alive together, as ServeInProcess's `keep`.
template <typename A, typename B>
std::shared_ptr<void> KeepBoth(std::shared_ptr<A> a, std::shared_ptr<B> b) {
  return std::make_shared<std::pair<std::shared_ptr<A>, std::shared_ptr<B>>>(std::move(a),
                                                                             std::move(b));
}

}  // namespace trellis::rpc::testing

#endif  // TRELLIS_RPC_TESTING_IN_PROCESS_SERVER_H_
