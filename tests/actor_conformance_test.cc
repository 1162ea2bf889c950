// The actor conformance suite (actor/testing/actor_conformance.h) against
// every binding of actor::RolloutWorker: the local actor, its gRPC client
// talking to the Actor service served in this process, and the actor pool
// of two local actors.

#include <memory>
#include <utility>
#include <vector>

#include "actor/actor_service.h"
#include "actor/local_actor.h"
#include "actor/testing/actor_conformance.h"
#include "rpc/channel.h"
#include "rpc/testing/in_process_server.h"
#include "scheduler/actor_pool.h"

namespace trellis::actor::conformance {
namespace {

absl::StatusOr<BoundActor> MakeLocal(const ActorSetup& setup) {
  LocalActorOptions options;
  options.worker_id = setup.worker_id;
  absl::StatusOr<std::unique_ptr<RolloutWorker>> actor =
      NewLocalActor(setup.model, setup.tokenizer, setup.receiver, nullptr, options);
  if (!actor.ok()) return actor.status();
  return BoundActor{nullptr, *std::move(actor)};
}

absl::StatusOr<BoundActor> MakeGrpc(const ActorSetup& setup) {
  absl::StatusOr<BoundActor> engine = MakeLocal(setup);
  if (!engine.ok()) return engine.status();
  std::shared_ptr<RolloutWorker> worker = std::move(engine->worker);
  auto service = std::make_shared<ActorService>(setup.worker_id);
  service->Bind(worker.get(), config::RequestLimitsFor(setup.model, setup.tokenizer->vocab_size()));
  absl::StatusOr<std::shared_ptr<rpc::Server>> server =
      rpc::testing::ServeInProcess(service.get(), rpc::testing::KeepBoth(service, worker));
  if (!server.ok()) return server.status();
  return BoundActor{*server, NewGrpcActorClient(rpc::NewChannel((*server)->address()),
                                                setup.worker_id, absl::Seconds(30))};
}

absl::StatusOr<BoundActor> MakePool(const ActorSetup& setup) {
  std::vector<scheduler::ActorPool::Member> members;
  for (const char* id : {"actor-0", "actor-1"}) {
    ActorSetup one = setup;
    one.worker_id = id;
    absl::StatusOr<BoundActor> actor = MakeLocal(one);
    if (!actor.ok()) return actor.status();
    members.push_back({id, std::move(actor->worker)});
  }
  return BoundActor{nullptr, std::make_unique<scheduler::ActorPool>(std::move(members), nullptr,
                                                                    nullptr, nullptr)};
}

INSTANTIATE_TEST_SUITE_P(Bindings, ActorConformanceTest,
                         ::testing::Values(ActorFactory{"local", MakeLocal},
                                           ActorFactory{"grpc", MakeGrpc},
                                           ActorFactory{"pool", MakePool}),
                         ActorFactoryName);

}  // namespace
}  // namespace trellis::actor::conformance
