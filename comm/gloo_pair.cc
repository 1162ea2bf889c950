#include "comm/gloo_pair.h"

#include <exception>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "absl/strings/str_cat.h"
#include "comm/tcp_store.h"

namespace trellis::comm {

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

absl::StatusOr<std::shared_ptr<GlooDevice>> NewGlooDevice(const std::string& store_host,
                                                          const std::string& local_host) {
  std::string local = local_host;
  if (local.empty() && IsLoopback(store_host)) local = store_host;
  try {
    return local.empty() ? GlooGroup::createDefaultDevice()
                         : GlooGroup::createDeviceForHostname(local);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "comm: no gloo device for ", local.empty() ? "this host" : local, ": ", e.what()));
  }
}

absl::StatusOr<c10::intrusive_ptr<GlooGroup>> JoinGlooGroup(
    const c10::intrusive_ptr<c10d::Store>& store, const std::string& prefix, int rank, int size,
    const std::shared_ptr<GlooDevice>& device, absl::Duration timeout) {
  try {
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(prefix, store);
    auto options = GlooGroup::Options::create(ToMs(timeout));
    options->devices = {device};
    options->threads = 1;
    return c10::make_intrusive<GlooGroup>(prefixed, rank, size, options);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("comm: rendezvous of gloo group '", prefix,
                                               "' (rank ", rank, " of ", size,
                                               ") failed: ", e.what()));
  }
}

absl::Status WaitWork(const c10::intrusive_ptr<c10d::Work>& work, absl::Duration timeout,
                      const char* what) {
  try {
    if (!work->wait(ToMs(timeout))) {
      return absl::CancelledError(absl::StrCat(what, " was aborted"));
    }
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    if (msg.find("Timed out") != std::string::npos) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": no answer within ", absl::FormatDuration(timeout)));
    }
    return absl::UnavailableError(absl::StrCat(what, ": ", msg));
  }
  return absl::OkStatus();
}

}  // namespace trellis::comm
