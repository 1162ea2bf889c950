#include "launch/weight_ends.h"

#include <utility>
#include <vector>

#include "config/rank_memory.h"
#include "loop/recipe.h"
#include "rpc/auth.h"
#include "rpc/channel.h"
#include "weightsync/registry.h"
#include "weightsync/reshard_ends.h"

namespace trellis::launch {
namespace {

// What makes this worker's end of the weight transport from its
// assignment. `publisher_port` is the port a publisher binds (gloo: its
// rendezvous store); `own_host` is the host this worker advertises: an
// actor's gloo device binds it, so that the learner reaches it over the
// same network as the worker's service.
absl::StatusOr<weightsync::TransportOptions> TransportOptionsOf(const v1::TransportAssignment& t,
                                                                bool publisher,
                                                                const std::string& own_host,
                                                                int publisher_port) {
  absl::StatusOr<rpc::HostPort> learner = rpc::SplitHostPort(t.address());
  if (!learner.ok()) return learner.status();
  weightsync::TransportOptions options;
  options.bucket_bytes = t.bucket_bytes();
  options.host = learner->host;
  options.port = publisher ? publisher_port : learner->port;
  options.num_receivers = t.num_receivers();
  options.receiver_index = t.receiver_index();
  if (!publisher) options.local_host = own_host;
  // The publisher's store serves only this job's processes.
  options.secret = rpc::ProcessSecret().value();
  return options;
}

// A resharding sync's end: every learner rank publishes its shards from
// its own address; an actor reads every rank's directory.
absl::StatusOr<WeightEnds> ReshardEnds(const v1::Assignment& a, v1::Role role,
                                       const std::string& host, int transport_port) {
  const v1::TransportAssignment& t = a.transport();
  const bool learner = role == v1::LEARNER;
  absl::StatusOr<weightsync::TransportOptions> transport =
      TransportOptionsOf(t, learner, host, transport_port);
  if (!transport.ok()) return transport.status();
  weightsync::ReshardEndOptions options;
  options.transport = *std::move(transport);
  options.transport_name = t.kind();
  options.learner_ranks = t.reshard_addresses_size();
  options.actor_ranks = a.job().deployment().actor().tensor_parallel();
  WeightEnds ends;
  if (learner) {
    options.transport.host = host;
    ends.publisher = std::make_unique<weightsync::ShardPublisher>(std::move(options),
                                                                  a.learner_group().rank());
    return ends;
  }
  std::vector<std::pair<std::string, int>> directories;
  for (const std::string& address : t.reshard_addresses()) {
    absl::StatusOr<rpc::HostPort> d = rpc::SplitHostPort(address);
    if (!d.ok()) return d.status();
    directories.emplace_back(d->host, d->port);
  }
  ends.receiver =
      std::make_unique<weightsync::SliceReceiver>(std::move(options), std::move(directories));
  return ends;
}

}  // namespace

absl::StatusOr<WeightEnds> MakeWeightEnds(const v1::Assignment& assignment, v1::Role role,
                                          const std::string& host, int transport_port,
                                          weightsync::WeightStreamHost* weight_stream) {
  const v1::JobConfig& job = assignment.job();
  // Only to actors the recipe has (offline recipes start none).
  if (loop::WorkersNeeded(job, v1::ACTOR) == 0 || (role != v1::ACTOR && role != v1::LEARNER)) {
    return WeightEnds();
  }
  if (config::ReshardsWeights(job)) return ReshardEnds(assignment, role, host, transport_port);
  // Of a learner group, rank 0 alone publishes whole tensors.
  const bool publishes = role == v1::LEARNER;
  if (publishes && assignment.learner_group().rank() != 0) return WeightEnds();
  const v1::TransportAssignment& t = assignment.transport();
  // grpc's publisher is the WeightStream host on the learner's server.
  absl::StatusOr<weightsync::TransportRegistry> transports =
      weightsync::LaunchedTransports(weight_stream);
  if (!transports.ok()) return transports.status();
  absl::StatusOr<weightsync::TransportOptions> options =
      TransportOptionsOf(t, publishes, host, transport_port);
  if (!options.ok()) return options.status();
  WeightEnds ends;
  if (publishes) {
    absl::StatusOr<std::unique_ptr<weightsync::Publisher>> p =
        transports->NewPublisher(t.kind(), *options);
    if (!p.ok()) return p.status();
    ends.publisher = *std::move(p);
  } else {
    absl::StatusOr<std::unique_ptr<weightsync::Receiver>> r =
        transports->NewReceiver(t.kind(), *options);
    if (!r.ok()) return r.status();
    ends.receiver = *std::move(r);
  }
  return ends;
}

}  // namespace trellis::launch
