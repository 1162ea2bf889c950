#ifndef TRELLIS_WEIGHTSYNC_INTERNAL_STAGING_H_
#define TRELLIS_WEIGHTSYNC_INTERNAL_STAGING_H_

// The sender half that every pull-based transport shares: Publish packs and
// checksums the newest version and stages it (only the newest is kept);
// whoever serves a receiver waits here for a version >= its minimum.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "trellis/v1/rollout.pb.h"
#include "weightsync/internal/bucket_set.h"
#include "weightsync/transport.h"

namespace trellis::weightsync::internal {

class Stopwatch {
 public:
  double Seconds() const {
    return std::chrono::duration<double>(Clock::now() - start_).count();
  }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_ = Clock::now();
};

// Version, bytes, tensors and buckets of `set`; no timings.
v1::WeightSyncStats BaseStats(const BucketSet& set);

// Every receiver's last step, once `set` arrived and its checksums passed:
// CheckMatches, LoadInto (adopting into dst where `owned` allows), and the
// stats with `transfer_seconds` and the load's seconds.
[[nodiscard]] absl::StatusOr<v1::WeightSyncStats> FinishReceive(
    const BucketSet& set, const NamedTensors& dst, double transfer_seconds,
    const std::vector<at::Tensor>* owned = nullptr);

// The newest staged version of one sender. Thread-safe.
class VersionStage {
 public:
  // `name` prefixes error messages ("weightsync gloo").
  VersionStage(std::string name, int64_t bucket_bytes);

  // Packs (gather) and checksums (transfer) `tensors` as `version`, then
  // makes it the staged version and wakes every waiter. Returns
  // FailedPrecondition unless `version` exceeds the staged one,
  // InvalidArgument for bad tensors (see PackBuckets).
  [[nodiscard]] absl::StatusOr<v1::WeightSyncStats> Stage(
      int64_t version, const NamedTensors& tensors);

  // How far past the newest staged version a receiver may ask: the one a
  // Stage in progress may bring. The driver publishes a version before any
  // receiver asks for it.
  static constexpr int64_t kVersionsInFlight = 1;

  // Waits until `deadline` for a staged version >= `min_version`. Returns
  // it (immutable while shared, but for Corrupt), or DeadlineExceeded
  // naming `min_version` and the newest staged version, or Cancelled once
  // Close() was called. A version more than kVersionsInFlight past the
  // newest staged one will never come: FailedPrecondition at once, without
  // waiting (before anything is staged every version is waited for).
  [[nodiscard]] absl::StatusOr<std::shared_ptr<const BucketSet>> WaitFor(
      int64_t min_version, absl::Time deadline);

  // The newest staged version, or -1.
  int64_t newest_version();

  // Wakes every waiter and makes later waits return Cancelled.
  void Close();

  // Flips every bit of byte `byte % size` of bucket `bucket` of the staged
  // version in place (its checksum is left alone). FailedPrecondition when
  // nothing is staged, OutOfRange for a missing or empty bucket.
  [[nodiscard]] absl::Status Corrupt(int bucket, int64_t byte);

 private:
  bool ReadyLocked(int64_t min_version) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckVersionLocked(int64_t version) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string name_;
  const int64_t bucket_bytes_;
  absl::Mutex mu_;
  absl::CondVar staged_cv_;
  std::shared_ptr<BucketSet> latest_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

// Mixed into every publisher that holds a VersionStage, so that the
// fault-injection hook (inprocess_testing.h) reaches it through a
// dynamic_cast from Publisher.
class StagedSender {
 public:
  virtual ~StagedSender() = default;
  virtual VersionStage* stage() = 0;
};

}  // namespace trellis::weightsync::internal

#endif  // TRELLIS_WEIGHTSYNC_INTERNAL_STAGING_H_
