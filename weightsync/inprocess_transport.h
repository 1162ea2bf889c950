#ifndef TRELLIS_WEIGHTSYNC_INPROCESS_TRANSPORT_H_
#define TRELLIS_WEIGHTSYNC_INPROCESS_TRANSPORT_H_

// Colocated learner and actors in one process: buckets are copied through
// shared memory. Only the newest version is kept, so a receiver always gets
// the newest (>= min_version). Publish reports gather = packing, transfer =
// checksumming and swapping the buckets in; Receive reports transfer =
// verifying checksums, load = copying into dst. Fault injection for tests:
// internal/inprocess_testing.h.

#include <memory>

#include "absl/status/status.h"
#include "weightsync/transport.h"

namespace trellis::weightsync {

class TransportRegistry;

// Thread-safe; any number of receivers, which share the publisher's state
// and may outlive it: once it is gone they still get what it published,
// and Unavailable for anything newer.
class InProcessPublisher : public Publisher {
 public:
  virtual std::unique_ptr<Receiver> NewReceiver() = 0;
};

// Reads options.bucket_bytes.
std::unique_ptr<InProcessPublisher> NewInProcessPublisher(const TransportOptions& options = {});

// Registers "inprocess" (see RegisterBuiltinTransports, registry.h).
[[nodiscard]] absl::Status RegisterInProcessTransport(TransportRegistry& registry);

}  // namespace trellis::weightsync

#endif  // TRELLIS_WEIGHTSYNC_INPROCESS_TRANSPORT_H_
