#include "weightsync/internal/threaded_sender.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace trellis::weightsync::internal {

absl::Status CheckReceiverIndex(const std::string& transport, bool sender,
                                int receiver_index, int num_receivers) {
  if (sender && receiver_index != -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        transport, ": a sender has receiver_index -1, got ", receiver_index));
  }
  if (!sender && (receiver_index < 0 || receiver_index >= num_receivers)) {
    return absl::InvalidArgumentError(absl::StrCat(transport, ": receiver_index must be in 0..",
                                                   num_receivers - 1, ", got ", receiver_index));
  }
  return absl::OkStatus();
}

bool SenderCore::SleepUnlessStopping(absl::Duration d) {
  absl::MutexLock lock(&mu);
  mu.AwaitWithTimeout(
      absl::Condition(+[](std::atomic<bool>* s) { return s->load(); }, &stopping), d);
  return !stopping;
}

ThreadedSender::ThreadedSender(std::shared_ptr<SenderCore> core,
                               std::vector<std::thread> threads, std::string name,
                               absl::Duration grace)
    : core_(std::move(core)), threads_(std::move(threads)), name_(std::move(name)),
      grace_(grace) {}

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

absl::StatusOr<v1::WeightSyncStats> ThreadedSender::Receive(int64_t, const NamedTensors&,
                                                            absl::Duration) {
  return absl::UnimplementedError(absl::StrCat(name_, ": Receive on the sending end"));
}

}  // namespace trellis::weightsync::internal
