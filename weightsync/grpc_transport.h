#ifndef TRELLIS_WEIGHTSYNC_GRPC_TRANSPORT_H_
#define TRELLIS_WEIGHTSYNC_GRPC_TRANSPORT_H_

// Weights over a gRPC stream (trellis.v1.WeightStream, weights.proto): the
// fallback where gloo cannot connect (a firewall that passes only the
// learner's gRPC port, say). Pull-based like every transport: Publish packs,
// checksums and stages the newest version; a receiver's Receive calls
// Fetch(min_version) and the publisher's server streams the newest staged
// version >= it: a header (manifest, bucket sizes, checksums), then the
// buckets' bytes in chunks of at most 4 MiB. The receiver checksums each
// bucket as its last chunk lands and loads all-or-nothing.
//
// Lives in trellis::weightsync_grpc so that trellis::weightsync builds
// without gRPC. Publish reports gather = packing, transfer = checksumming
// and staging; Receive reports transfer = from the header's arrival to the
// last bucket verified, load = copying into dst.

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "weightsync/registry.h"
#include "weightsync/transport.h"

namespace grpc {
class Service;
}

namespace trellis::weightsync {

// The WeightStream service a process's server carries (the learner serves
// it beside its own service, before it knows which transport the job
// uses). It serves the versions of the publisher it handed out; while it
// has none, a Fetch waits for one until its deadline. Thread-safe.
// REQUIRES: it outlives the server and its publisher.
class WeightStreamHost {
 public:
  virtual ~WeightStreamHost() = default;

  // For the server's service list.
  virtual grpc::Service* service() = 0;

  // The publisher whose versions this service serves; reads
  // options.bucket_bytes. FailedPrecondition while an earlier one is live.
  // Destroying it ends the Fetch calls waiting on it (Unavailable).
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<Publisher>> NewPublisher(
      const TransportOptions& options) = 0;
};

std::unique_ptr<WeightStreamHost> NewWeightStreamHost();

// The receiving end, dialing the server at options.host:options.port.
// Receive waits up to `timeout` (for the publisher to come up, too) and
// answers DeadlineExceeded by timeout + ~0.3 s whatever the publisher does;
// a publisher that died mid-stream gives Unavailable. InvalidArgument for
// an empty host or a port outside 1..65535.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Receiver>> NewGrpcReceiver(
    const TransportOptions& options);

// Registers "grpc" (Endpoint::kLearnerServer): publishers come from `host`
// (null, for a process whose server carries no WeightStream service:
// FailedPrecondition), receivers from NewGrpcReceiver.
[[nodiscard]] absl::Status RegisterGrpcTransport(TransportRegistry& registry,
                                                 WeightStreamHost* host);

// The transports a launched job's workers offer: the built-ins, grpc,
// whose publishers come from `host` as above (the scheduler, which only
// asks where each is reached, passes null), and nccl and cuda_ipc where
// this build has them (CUDA found; weightsync/CMakeLists.txt).
[[nodiscard]] absl::StatusOr<TransportRegistry> LaunchedTransports(WeightStreamHost* host);

}  // namespace trellis::weightsync

#endif  // TRELLIS_WEIGHTSYNC_GRPC_TRANSPORT_H_
