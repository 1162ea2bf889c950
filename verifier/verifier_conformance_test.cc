// The verifier conformance suite (verifier/testing/verifier_conformance.h)
// against every binding of verifier::VerifierClient: the local client, the
// pool (verifier/pool.h) behind it, the gRPC client of a Verifier service
// served in this process, and the "remote" verifier calling that service.

#include <memory>
#include <utility>

#include "rpc/channel.h"
#include "rpc/testing/in_process_server.h"
#include "verifier/pool.h"
#include "verifier/testing/verifier_conformance.h"
#include "verifier/verifier_service.h"

namespace trellis::verifier::conformance {
namespace {

v1::VerifierConfig PoolConfig(const std::string& name) {
  v1::VerifierConfig config;
  config.set_name(name);
  return config;
}

absl::StatusOr<BoundVerifier> MakeLocal(std::unique_ptr<Verifier> inner) {
  return BoundVerifier{nullptr, NewLocalVerifierClient(std::move(inner))};
}

absl::StatusOr<BoundVerifier> MakePool(std::unique_ptr<Verifier> inner) {
  return BoundVerifier{nullptr, NewLocalVerifierClient(NewVerifierPool(
                                    std::move(inner), PoolConfig("exact")))};
}

// A Verifier service of `inner` on 127.0.0.1:0.
absl::StatusOr<std::shared_ptr<rpc::Server>> Serve(std::unique_ptr<Verifier> inner) {
  std::shared_ptr<v1::Verifier::Service> service =
      NewVerifierService(std::shared_ptr<const Verifier>(std::move(inner)));
  return rpc::testing::ServeInProcess(service.get(), service);
}

absl::StatusOr<BoundVerifier> MakeGrpc(std::unique_ptr<Verifier> inner) {
  absl::StatusOr<std::shared_ptr<rpc::Server>> server = Serve(std::move(inner));
  if (!server.ok()) return server.status();
  return BoundVerifier{*server, NewGrpcVerifierClient(rpc::NewChannel((*server)->address()),
                                                      "verifier-0", absl::Seconds(30))};
}

absl::StatusOr<BoundVerifier> MakeRemote(std::unique_ptr<Verifier> inner) {
  absl::StatusOr<std::shared_ptr<rpc::Server>> server = Serve(std::move(inner));
  if (!server.ok()) return server.status();
  VerifierRegistry registry;
  if (absl::Status s = RegisterRemoteVerifier(registry); !s.ok()) return s;
  v1::VerifierConfig config = PoolConfig("remote");
  config.set_address((*server)->address());
  absl::StatusOr<std::unique_ptr<Verifier>> remote = registry.Create(config);
  if (!remote.ok()) return remote.status();
  return BoundVerifier{*server, NewLocalVerifierClient(*std::move(remote))};
}

INSTANTIATE_TEST_SUITE_P(Bindings, VerifierConformanceTest,
                         ::testing::Values(VerifierFactory{"local", MakeLocal},
                                           VerifierFactory{"pool", MakePool},
                                           VerifierFactory{"grpc", MakeGrpc},
                                           VerifierFactory{"remote", MakeRemote}),
                         VerifierFactoryName);

}  // namespace
}  // namespace trellis::verifier::conformance
