#include "weightsync/internal/threaded_sender.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/tcp_store.h"

namespace trellis::weightsync::internal {

absl::Status CheckSlotOptions(const std::string& transport, const TransportOptions& options,
                              bool publisher) {
  if (options.port <= 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(transport, ": port must be in 1..65535, got ",
                                                   options.port,
                                                   " (comm::PickFreeTcpPort finds one)"));
  }
  if (options.num_receivers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(transport, ": num_receivers must be >= 1, got ", options.num_receivers));
  }
  if (options.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(transport,
                                                   ": connect_timeout must be positive, got ",
                                                   absl::FormatDuration(options.connect_timeout)));
  }
  if (!publisher &&
      (options.receiver_index < 0 || options.receiver_index >= options.num_receivers)) {
    return absl::InvalidArgumentError(absl::StrCat(transport, ": receiver_index must be in 0..",
                                                   options.num_receivers - 1, ", got ",
                                                   options.receiver_index));
  }
  return absl::OkStatus();
}

absl::Status HostStore(const std::string& transport, const TransportOptions& options,
                       SenderCore& core) {
  if (absl::Status s = CheckSlotOptions(transport, options, /*publisher=*/true); !s.ok()) {
    return s;
  }
  absl::StatusOr<c10::intrusive_ptr<c10d::Store>> store =
      comm::ConnectStore(options.host, options.port, /*server=*/true, options.connect_timeout,
                         options.secret);
  if (!store.ok()) return store.status();
  core.store = *std::move(store);
  return absl::OkStatus();
}

absl::StatusOr<c10::intrusive_ptr<c10d::Store>> ReachStore(const TransportOptions& options,
                                                           absl::Time deadline) {
  const absl::Duration budget = std::min(deadline - absl::Now(), options.connect_timeout);
  if (budget <= absl::ZeroDuration()) {
    return absl::DeadlineExceededError("no time left to connect");
  }
  if (absl::Status s = comm::WaitForListener(options.host, options.port, deadline); !s.ok()) {
    return s;
  }
  return comm::ConnectStore(options.host, options.port, /*server=*/false, budget, options.secret);
}

bool SenderCore::SleepUnlessStopping(absl::Duration d) {
  absl::MutexLock lock(&mu);
  mu.AwaitWithTimeout(absl::Condition(
                          +[](std::atomic<bool>* s) { return s->load(); }, &stopping),
                      d);
  return !stopping;
}

ThreadedSender::ThreadedSender(std::shared_ptr<SenderCore> core, std::vector<std::thread> threads,
                               absl::Duration grace)
    : core_(std::move(core)), threads_(std::move(threads)), grace_(grace) {}

ThreadedSender::~ThreadedSender() {
  core_->stopping = true;
  core_->stage.Close();
  {
    absl::MutexLock lock(&core_->mu);
    core_->AbortPending();
    auto done = +[](int* live) { return *live == 0; };
    core_->mu.AwaitWithTimeout(absl::Condition(done, &core_->live_threads), grace_);
    if (core_->live_threads != 0) {
      for (std::thread& t : threads_) t.detach();
      threads_.clear();
    }
  }
  for (std::thread& t : threads_) t.join();
}

absl::StatusOr<v1::WeightSyncStats> ThreadedSender::Publish(int64_t version,
                                                            const NamedTensors& tensors) {
  return core_->stage.Stage(version, tensors);
}

}  // namespace trellis::weightsync::internal
