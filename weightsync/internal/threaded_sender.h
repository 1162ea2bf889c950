#ifndef TRELLIS_WEIGHTSYNC_INTERNAL_THREADED_SENDER_H_
#define TRELLIS_WEIGHTSYNC_INTERNAL_THREADED_SENDER_H_

// What the transports whose receivers are served by threads of the
// publisher (gloo, nccl) share: the check of their options, the state the
// serving threads share, and the Publisher that owns them.

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "weightsync/internal/staging.h"
#include "weightsync/transport.h"

namespace trellis::weightsync::internal {

// InvalidArgument naming `transport` ("weightsync gloo") and the field
// unless `options` has a port in 1..65535, num_receivers >= 1, a positive
// connect_timeout and, on a receiver (not `publisher`), a receiver_index in
// 0..num_receivers-1.
[[nodiscard]] absl::Status CheckSlotOptions(const std::string& transport,
                                            const TransportOptions& options, bool publisher);

// A receiver of slot transport `transport`: R(options), once
// CheckSlotOptions passes for a receiver.
template <typename R>
[[nodiscard]] absl::StatusOr<std::unique_ptr<Receiver>> NewSlotReceiver(
    const std::string& transport, const TransportOptions& options) {
  if (absl::Status s = CheckSlotOptions(transport, options, /*publisher=*/false); !s.ok()) {
    return s;
  }
  return std::unique_ptr<Receiver>(std::make_unique<R>(options));
}

// What a sender's serving threads share with it. Each thread decrements
// live_threads (under mu) as it ends.
struct SenderCore {
  // `slots`: see VersionStage.
  SenderCore(const std::string& name, int64_t bucket_bytes, int slots = 0)
      : stage(name, bucket_bytes, slots) {}
  virtual ~SenderCore() = default;

  // Called under mu when the sender stops, after `stopping` is set: unblock
  // whatever the threads wait on (pending network operations).
  virtual void AbortPending() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {}

  // Waits up to `d`, less if the sender stops; false once it is stopping.
  bool SleepUnlessStopping(absl::Duration d);

  VersionStage stage;
  // The rendezvous store the publisher hosts (HostStore), kept while the
  // threads run.
  c10::intrusive_ptr<c10d::Store> store;
  std::atomic<bool> stopping{false};
  absl::Mutex mu;
  int live_threads ABSL_GUARDED_BY(mu) = 0;
};

// What every threaded publisher does first: checks `options`
// (CheckSlotOptions) and hosts the rendezvous store at options.host:options.port
// into core.store. Unavailable if it cannot be bound.
[[nodiscard]] absl::Status HostStore(const std::string& transport, const TransportOptions& options,
                                     SenderCore& core);

// Publish stages the version for the threads to serve. Destruction sets `stopping`, closes the
// stage, aborts what is pending and waits up to `grace` for the threads; threads still stuck then
// (in a rendezvous, ended by its connect timeout) are detached: each holds its own reference to the
// core.
class ThreadedSender final : public Publisher, public StagedSender {
 public:
  // REQUIRES: core->live_threads counts `threads`.
  ThreadedSender(std::shared_ptr<SenderCore> core, std::vector<std::thread> threads,
                 absl::Duration grace);
  ~ThreadedSender() override;

  absl::StatusOr<v1::WeightSyncStats> Publish(int64_t version,
                                              const NamedTensors& tensors) override;
  VersionStage* stage() override { return &core_->stage; }

 private:
  std::shared_ptr<SenderCore> core_;
  std::vector<std::thread> threads_;
  const absl::Duration grace_;
};

// The publisher of a transport served by one thread per receiver slot:
// starts serve(core, k) for each slot k in 0..n-1, and also(core) when
// given (a thread that watches every slot), counted in core->live_threads
// (each thread decrements it as it ends).
template <typename Core>
std::unique_ptr<Publisher> StartSlotThreads(std::shared_ptr<Core> core, int n,
                                            void (*serve)(std::shared_ptr<Core>, int),
                                            absl::Duration grace,
                                            void (*also)(std::shared_ptr<Core>) = nullptr) {
  {
    absl::MutexLock lock(&core->mu);
    core->live_threads = n + (also != nullptr ? 1 : 0);
  }
  std::vector<std::thread> threads;
  for (int k = 0; k < n; ++k) threads.emplace_back(serve, core, k);
  if (also != nullptr) threads.emplace_back(also, core);
  return std::make_unique<ThreadedSender>(std::move(core), std::move(threads), grace);
}

// What every threaded transport's receiver does first: reaches the
// publisher's store at options.host:options.port by `deadline` (waiting
// for it to listen), within options.connect_timeout per attempt.
// DeadlineExceeded when no time is left, else ConnectStore's errors.
[[nodiscard]] absl::StatusOr<c10::intrusive_ptr<c10d::Store>> ReachStore(
    const TransportOptions& options, absl::Time deadline);

}  // namespace trellis::weightsync::internal

#endif  // TRELLIS_WEIGHTSYNC_INTERNAL_THREADED_SENDER_H_
