#include "weightsync/internal/gloo_pair.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <exception>

#include "absl/strings/str_cat.h"
#include "weightsync/internal/tcp_store.h"

namespace trellis::weightsync::internal::gloo {

std::string GenerationKey(int slot) {
  return absl::StrCat("slot/", slot, "/generation");
}

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

absl::Status WaitWork(const c10::intrusive_ptr<c10d::Work>& work,
                      absl::Duration timeout, const char* what) {
  try {
    if (!work->wait(ToMs(timeout))) {
      return absl::CancelledError(absl::StrCat(what, " was aborted"));
    }
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    if (msg.find("Timed out") != std::string::npos) {
      return absl::DeadlineExceededError(absl::StrCat(
          what, ": no answer within ", absl::FormatDuration(timeout)));
    }
    return absl::UnavailableError(absl::StrCat(what, ": ", msg));
  }
  return absl::OkStatus();
}

absl::StatusOr<c10::intrusive_ptr<PG>> ConnectPair(
    const c10::intrusive_ptr<c10d::Store>& store,
    const std::shared_ptr<::gloo::transport::Device>& device, int slot,
    int64_t generation, int rank, absl::Duration timeout) {
  try {
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(
        absl::StrCat("pair/", slot, "/", generation), store);
    auto options = PG::Options::create(ToMs(timeout));
    options->devices = {device};
    options->threads = 1;  // Only send/recv, which the device thread runs.
    return c10::make_intrusive<PG>(prefixed, rank, 2, options);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "weightsync gloo: pair rendezvous of receiver slot ", slot,
        " failed: ", e.what()));
  }
}

absl::Status CheckEndpoint(const GlooEndpoint& ep) {
  if (ep.port <= 0 || ep.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("weightsync gloo: port must be in 1..65535, got ",
                     ep.port, " (PickFreeTcpPort finds one)"));
  }
  if (ep.num_receivers < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weightsync gloo: num_receivers must be >= 1, got ", ep.num_receivers));
  }
  if (ep.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "weightsync gloo: connect_timeout must be positive");
  }
  return absl::OkStatus();
}

}  // namespace trellis::weightsync::internal::gloo
