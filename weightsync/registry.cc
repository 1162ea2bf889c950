#include "weightsync/registry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "weightsync/gloo_transport.h"
#include "weightsync/inprocess_transport.h"
#include "weightsync/tcp_transport.h"

namespace trellis::weightsync {

absl::Status TransportRegistry::Register(const std::string& name, PublisherFactory publisher,
                                         ReceiverFactory receiver, Endpoint endpoint) {
  const bool valid = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '_';
  });
  if (!valid) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weight transport \"", name, "\": a name is lowercase letters, digits and '_'"));
  }
  if (!publisher || !receiver) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight transport \"", name, "\": null factory"));
  }
  if (!transports_
           .emplace(name, Factories{std::move(publisher), std::move(receiver), endpoint})
           .second) {
    return absl::AlreadyExistsError(
        absl::StrCat("weight transport \"", name, "\" is already registered"));
  }
  return absl::OkStatus();
}

absl::StatusOr<const TransportRegistry::Factories*> TransportRegistry::Find(
    absl::string_view name) const {
  auto it = transports_.find(absl::AsciiStrToLower(name));
  if (it == transports_.end()) {
    const std::vector<std::string> known = Names();
    return absl::NotFoundError(absl::StrCat(
        "deployment.weight_transport: unknown transport \"", name,
        "\"; registered transports: ", known.empty() ? "(none)" : absl::StrJoin(known, ", ")));
  }
  return &it->second;
}

absl::StatusOr<std::unique_ptr<Publisher>> TransportRegistry::NewPublisher(
    absl::string_view name, const TransportOptions& options) const {
  absl::StatusOr<const Factories*> found = Find(name);
  if (!found.ok()) return found.status();
  return (*found)->publisher(options);
}

absl::StatusOr<std::unique_ptr<Receiver>> TransportRegistry::NewReceiver(
    absl::string_view name, const TransportOptions& options) const {
  absl::StatusOr<const Factories*> found = Find(name);
  if (!found.ok()) return found.status();
  return (*found)->receiver(options);
}

absl::StatusOr<Endpoint> TransportRegistry::EndpointOf(absl::string_view name) const {
  absl::StatusOr<const Factories*> found = Find(name);
  if (!found.ok()) return found.status();
  return (*found)->endpoint;
}

std::vector<std::string> TransportRegistry::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, factories] : transports_) names.push_back(name);
  return names;
}

absl::Status RegisterBuiltinTransports(TransportRegistry& registry) {
  if (absl::Status s = RegisterInProcessTransport(registry); !s.ok()) return s;
  if (absl::Status s = registry.Register("gloo", NewGlooPublisher, NewGlooReceiver); !s.ok()) {
    return s;
  }
  return registry.Register("tcp", NewTcpPublisher, NewTcpReceiver);
}

}  // namespace trellis::weightsync
