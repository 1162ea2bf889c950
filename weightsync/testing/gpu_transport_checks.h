#ifndef TRELLIS_WEIGHTSYNC_TESTING_GPU_TRANSPORT_CHECKS_H_
#define TRELLIS_WEIGHTSYNC_TESTING_GPU_TRANSPORT_CHECKS_H_

// What the tests of the GPU transports that link through the publisher's
// rendezvous store (nccl, cuda_ipc) set up and check alike, beside the conformance
// suite (transport_conformance.h). Compiled into each of those tests.

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "weightsync/registry.h"
#include "weightsync/testing/transport_conformance.h"
#include "weightsync/transport.h"

namespace trellis::weightsync::conformance {

// Options for a publisher on a free local port (0 when none is found, which
// the factories refuse), with 20 s to connect.
TransportOptions FreshStoreOptions();

// Both ends of transport `name`, which `register_transport` adds to a
// registry, as the role factories make them: on a fresh port
// (FreshStoreOptions) with `base`'s bucket_bytes, the publisher on GPU
// `publisher_device` and the receiver on GPU `receiver_device`.
absl::StatusOr<TransportEnds> MakeOnDevices(absl::Status (*register_transport)(TransportRegistry&),
                                            const std::string& name, const TransportOptions& base,
                                            int publisher_device, int receiver_device);

// Expects a Receive of version 1 with a 1 s timeout from `receiver`, whose
// publisher never started, to fail with DeadlineExceeded or Unavailable.
void ExpectNoPublisherIsAnError(Receiver& receiver);

// Expects InvalidArgument from `new_publisher` for options without a port,
// and from `new_receiver` for a receiver_index past num_receivers.
void ExpectBadOptionsAreInvalidArgument(const TransportRegistry::PublisherFactory& new_publisher,
                                        const TransportRegistry::ReceiverFactory& new_receiver);

}  // namespace trellis::weightsync::conformance

#endif  // TRELLIS_WEIGHTSYNC_TESTING_GPU_TRANSPORT_CHECKS_H_
