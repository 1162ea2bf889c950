#ifndef TRELLIS_WEIGHTSYNC_GRPC_TRANSPORT_H_
#define TRELLIS_WEIGHTSYNC_GRPC_TRANSPORT_H_

// Weights over a gRPC stream (trellis.v1.WeightStream, weights.proto): the
// fallback where gloo cannot connect (a firewall that passes only the
// learner's gRPC port, say). Pull-based like every transport: Publish packs,
// checksums and stages the newest version; a receiver's Receive calls
// Fetch(min_version) and the sender streams the newest staged version >=
// it: a header (manifest, bucket sizes, checksums), then the buckets' bytes
// in chunks of at most 4 MiB. The receiver checksums each bucket as its
// last chunk lands and loads all-or-nothing.
//
// Lives in trellis::weightsync_grpc so that trellis::weightsync builds
// without gRPC. Publish reports gather = packing, transfer = checksumming
// and staging; Receive reports transfer = from the header's arrival to the
// last bucket verified, load = copying into dst.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "weightsync/transport.h"

namespace grpc {
class Service;
}

namespace trellis::weightsync {

// The sending end. Add service() to a server (rpc::Server::Start) that the
// receivers can reach. Receive returns Unimplemented. REQUIRES: the server
// is shut down before the sender is destroyed (the service is the
// sender's); destroying the sender ends the sender's waits first.
class GrpcSender : public Transport {
 public:
  virtual grpc::Service* service() = 0;
};

std::unique_ptr<GrpcSender> NewGrpcSender(TransportOptions options = {});

// The receiving end, dialing the sender's server at "host:port". Receive
// waits up to `timeout` (for the sender to come up, too) and answers
// DeadlineExceeded by timeout + ~0.3 s whatever the sender does; a sender
// that died mid-stream gives Unavailable. Publish returns Unimplemented.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Transport>> NewGrpcReceiver(
    const std::string& address, TransportOptions options = {});

}  // namespace trellis::weightsync

#endif  // TRELLIS_WEIGHTSYNC_GRPC_TRANSPORT_H_
