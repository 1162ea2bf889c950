#ifndef TRELLIS_ACTOR_ACTOR_SERVICE_H_
#define TRELLIS_ACTOR_ACTOR_SERVICE_H_

// The actor role over gRPC: the trellis.v1.Actor service around a
// RolloutWorker, and a RolloutWorker that calls one.

#include <memory>
#include <string>

#include <grpcpp/channel.h>

#include "absl/time/time.h"
#include "actor/rollout_worker.h"
#include "config/request_limits.h"
#include "model/torch_status.h"
#include "rpc/bound_worker.h"
#include "rpc/counted_request.h"
#include "trellis/v1/services.grpc.pb.h"

namespace trellis::actor {

class ActorService final : public rpc::CountingService<v1::Actor::Service> {
 public:
  explicit ActorService(std::string worker_id);
  // Requests are checked against `limits` (config/request_limits.h) before
  // they reach `worker`; token ids against limits.vocab_size.
  void Bind(RolloutWorker* worker, const config::RequestLimits& limits);

  // Actor.Generate, whose prompts are counted before the request is parsed
  // (rpc/counted_request.h); the replies go to `writer`.
  grpc::Status GenerateInto(grpc::ServerContext* context, const v1::GenerateRequest* request,
                            grpc::internal::WriterInterface<v1::GenerateResponse>* writer);
  grpc::Status SyncWeights(grpc::ServerContext* context, const v1::SyncWeightsRequest* request,
                           v1::WeightSyncStats* response) override;
  grpc::Status GetVersion(grpc::ServerContext* context, const v1::Empty* request,
                          v1::VersionResponse* response) override;

 private:
  rpc::BoundWorker<RolloutWorker> worker_;
  config::SharedLimits limits_;
};

// A RolloutWorker calling the Actor service at `address` (named `worker_id`
// in errors); each call has `timeout`.
std::unique_ptr<RolloutWorker> NewGrpcActorClient(std::shared_ptr<grpc::Channel> channel,
                                                  std::string worker_id,
                                                  absl::Duration timeout);

}  // namespace trellis::actor

#endif  // TRELLIS_ACTOR_ACTOR_SERVICE_H_
