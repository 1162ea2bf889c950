#ifndef TRELLIS_WEIGHTSYNC_REGISTRY_H_
#define TRELLIS_WEIGHTSYNC_REGISTRY_H_

// Weight transports by name: each registered transport makes its
// publishing and its receiving end from one TransportOptions. Built-ins
// register through explicit calls from where their libraries are linked:
// RegisterBuiltinTransports (inprocess, gloo, tcp: trellis::weightsync),
// RegisterGrpcTransport (grpc_transport.h, trellis::weightsync_grpc),
// RegisterNcclTransport (nccl_transport.h, trellis::weightsync_nccl),
// RegisterCudaIpcTransport (cuda_ipc_transport.h,
// trellis::weightsync_cuda_ipc).

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "weightsync/transport.h"

namespace trellis::weightsync {

// Where the receivers of a launched job reach the learner's publisher.
enum class Endpoint {
  // A port of the transport's own on the learner's host (the learner
  // registers it as its transport_address; gloo's rendezvous store).
  kOwnPort,
  // The learner's gRPC server, beside its Learner service (grpc's
  // WeightStream service).
  kLearnerServer,
};

class TransportRegistry {
 public:
  using PublisherFactory =
      std::function<absl::StatusOr<std::unique_ptr<Publisher>>(const TransportOptions&)>;
  using ReceiverFactory =
      std::function<absl::StatusOr<std::unique_ptr<Receiver>>(const TransportOptions&)>;

  // Registers transport `name`: lowercase letters, digits and '_'
  // (InvalidArgument otherwise, or for a null factory); AlreadyExists when
  // it is taken. REQUIRES: not concurrent with any other call.
  [[nodiscard]] absl::Status Register(const std::string& name, PublisherFactory publisher,
                                      ReceiverFactory receiver,
                                      Endpoint endpoint = Endpoint::kOwnPort);

  // The ends of transport `name`, matched ignoring case (so both a config
  // string, "gloo", and a proto enum value's name, "GLOO", find it):
  // NotFound naming the registered transports when there is none, else
  // what the transport's factory returns. Thread-safe.
  [[nodiscard]] absl::StatusOr<std::unique_ptr<Publisher>> NewPublisher(
      absl::string_view name, const TransportOptions& options) const;
  [[nodiscard]] absl::StatusOr<std::unique_ptr<Receiver>> NewReceiver(
      absl::string_view name, const TransportOptions& options) const;

  // The endpoint transport `name` registered with; NotFound as above.
  [[nodiscard]] absl::StatusOr<Endpoint> EndpointOf(absl::string_view name) const;

  // The registered names, sorted.
  std::vector<std::string> Names() const;

 private:
  struct Factories {
    PublisherFactory publisher;
    ReceiverFactory receiver;
    Endpoint endpoint;
  };
  absl::StatusOr<const Factories*> Find(absl::string_view name) const;

  std::map<std::string, Factories> transports_;
};

// "inprocess" (inprocess_transport.h): a receiver reads the live publisher
// made by this registry at the same host and port (FailedPrecondition when
// there is none; AlreadyExists for a second live publisher there).
// "gloo" (gloo_transport.h), "tcp" (tcp_transport.h).
[[nodiscard]] absl::Status RegisterBuiltinTransports(TransportRegistry& registry);

}  // namespace trellis::weightsync

#endif  // TRELLIS_WEIGHTSYNC_REGISTRY_H_
