#ifndef TRELLIS_WEIGHTSYNC_INTERNAL_THREADED_SENDER_H_
#define TRELLIS_WEIGHTSYNC_INTERNAL_THREADED_SENDER_H_

// What the transports whose receivers are served by threads of the sender
// (gloo, nccl) share: the endpoint's role check, the state the serving
// threads share, and the sending Transport that owns them.

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "weightsync/internal/staging.h"
#include "weightsync/transport.h"

namespace trellis::weightsync::internal {

// An endpoint's receiver_index for its end: -1 on the sender, in
// 0..num_receivers-1 on a receiver. InvalidArgument naming `transport`
// ("weightsync gloo") otherwise.
[[nodiscard]] absl::Status CheckReceiverIndex(const std::string& transport, bool sender,
                                              int receiver_index, int num_receivers);

// What a sender's serving threads share with it. Each thread decrements
// live_threads (under mu) as it ends.
struct SenderCore {
  SenderCore(const std::string& name, int64_t bucket_bytes) : stage(name, bucket_bytes) {}
  virtual ~SenderCore() = default;

  // Called under mu when the sender stops, after `stopping` is set: unblock
  // whatever the threads wait on (pending network operations).
  virtual void AbortPending() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {}

  // Waits up to `d`, less if the sender stops; false once it is stopping.
  bool SleepUnlessStopping(absl::Duration d);

  VersionStage stage;
  std::atomic<bool> stopping{false};
  absl::Mutex mu;
  int live_threads ABSL_GUARDED_BY(mu) = 0;
};

// Publish stages the version for the threads to serve; Receive is refused.
// Destruction sets `stopping`, closes the stage, aborts what is pending and
// waits up to `grace` for the threads; threads still stuck then (in a
// rendezvous, ended by its connect timeout) are detached: each holds its
// own reference to the core.
class ThreadedSender final : public Transport, public StagedSender {
 public:
  // `name` names the transport in errors ("weightsync gloo").
  // REQUIRES: core->live_threads counts `threads`.
  ThreadedSender(std::shared_ptr<SenderCore> core, std::vector<std::thread> threads,
                 std::string name, absl::Duration grace);
  ~ThreadedSender() override;

  absl::StatusOr<v1::WeightSyncStats> Publish(int64_t version,
                                              const NamedTensors& tensors) override;
  absl::StatusOr<v1::WeightSyncStats> Receive(int64_t, const NamedTensors&,
                                              absl::Duration) override;
  VersionStage* stage() override { return &core_->stage; }

 private:
  std::shared_ptr<SenderCore> core_;
  std::vector<std::thread> threads_;
  const std::string name_;
  const absl::Duration grace_;
};

}  // namespace trellis::weightsync::internal

#endif  // TRELLIS_WEIGHTSYNC_INTERNAL_THREADED_SENDER_H_
