#ifndef TRELLIS_WEIGHTSYNC_INTERNAL_STAGING_H_
#define TRELLIS_WEIGHTSYNC_INTERNAL_STAGING_H_

// The sender half that every pull-based transport shares: Publish packs and
// checksums the newest version and stages it (only the newest is kept);
// whoever serves a receiver waits here for a version >= its minimum, and
// may stream a version while it is packed, or from the published tensors
// in place once every receiver slot streams it (PackProgress).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <optional>
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
  double Seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

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

// How far the packing of one version has come: its buckets are packed and
// checksummed in order, front to back, and each byte may be sent as soon as
// it is packed. With `slots` > 0 the rest may be sent in place instead: once
// `slots` senders stream the version (Attach), packing stops where it is and
// they read every byte not packed yet from the published tensors, which the
// publisher keeps unchanged until they detach. Thread-safe.
class PackProgress {
 public:
  explicit PackProgress(size_t buckets, int slots = 0) : buckets_(buckets), slots_(slots) {}

  // Records that the first `bytes` bytes of bucket `i` are packed. Returns
  // false when packing stops there: every slot streams the version, so the
  // rest is sent in place.
  bool Packing(size_t i, int64_t bytes);
  // Records that buckets 0..n-1 are packed and checksummed.
  void Packed(size_t n);
  // Records that packing stopped with `error`; waiters get it.
  void Fail(absl::Status error);

  // Waits until `deadline` for the first `bytes` bytes of bucket `i` to be
  // packed (bytes < 0: all of it, and its checksum). Returns the packing
  // error, or DeadlineExceeded naming the bucket.
  [[nodiscard]] absl::Status WaitPacked(size_t i, absl::Time deadline, int64_t bytes = -1);

  // Where bytes [0, end) of bucket `i` are read from.
  enum class From { kBucket, kTensors };
  // Waits as WaitPacked(i, deadline, end), but returns kTensors at once when
  // those bytes will not be packed (sent in place).
  [[nodiscard]] absl::StatusOr<From> WaitReadable(size_t i, absl::Time deadline, int64_t end);
  // Whether bucket `i` is packed and checksummed in full.
  bool Whole(size_t i);

  // A sender streams the version; Detach when it no longer reads it.
  void Attach();
  void Detach();
  // Whether packing stopped for sending in place.
  bool in_place();
  // Waits until no sender streams the version.
  void AwaitDetached();

 private:
  bool ReadyLocked(size_t i, int64_t bytes) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t buckets_;
  const int slots_;
  absl::Mutex mu_;
  size_t packed_ ABSL_GUARDED_BY(mu_) = 0;  // Buckets packed in full.
  size_t current_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t current_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // Of bucket current_.
  absl::Status failed_ ABSL_GUARDED_BY(mu_);
  int attached_ ABSL_GUARDED_BY(mu_) = 0;
  // Packing stopped at current_bytes_ of bucket current_.
  bool in_place_ ABSL_GUARDED_BY(mu_) = false;
};

// A staged version as a sender streams it: bucket i's bytes and checksum
// may be read once progress->WaitPacked(i, ...) returned OK for them, and
// bytes that WaitReadable says are sent in place from `tensors` (the list
// published, in the manifest's order) as long as `attached` is held.
struct StreamedVersion {
  std::shared_ptr<const BucketSet> set;
  std::shared_ptr<PackProgress> progress;
  std::shared_ptr<const NamedTensors> tensors;
  // Detaches from progress when the last copy goes.
  std::shared_ptr<void> attached;
};

// The newest staged version of one sender. Thread-safe.
class VersionStage {
 public:
  // `name` prefixes error messages ("weightsync gloo"). With `slots` > 0
  // (the receivers served), a version whose slots all stream it while it
  // is packed is sent in place (PackProgress).
  VersionStage(std::string name, int64_t bucket_bytes, int slots = 0);

  // Packs and checksums `tensors` as `version`, one bucket at a time, into
  // the staged version's buckets when nothing else holds them (no fresh
  // pages to fault in; a sender still sending it keeps them, and fresh
  // buckets are allocated), then makes it the staged version and wakes
  // every waiter. While its buckets are reused the previous version is no
  // longer served: waiters get this one, which satisfies them as well (and
  // nothing, until the next Stage, if this one fails). Senders streaming (WaitForStream) get the
  // version as soon as its buckets are planned, and each bucket once packed, so that sending
  // overlaps packing. Calls are serialized. Returns FailedPrecondition unless `version` exceeds the
  // staged one, InvalidArgument for bad tensors (see PlanBuckets). Stats: gather is the planning
  // and copying, transfer the checksumming.
  [[nodiscard]] absl::StatusOr<v1::WeightSyncStats> Stage(int64_t version,
                                                          const NamedTensors& tensors);

  // How far past the newest version a sender may have handed out (the
  // staged one, or the one being packed, which a streaming sender serves) a
  // receiver may ask: the next, which a receiver holding the newest asks
  // for. The driver publishes a version before any receiver asks for it.
  static constexpr int64_t kVersionsInFlight = 1;

  // Waits until `deadline` for a staged version >= `min_version`, packed in
  // full. Returns it (immutable while shared, but for Corrupt), or
  // DeadlineExceeded naming `min_version` and the newest staged version, or
  // Cancelled once Close() was called. A version more than
  // kVersionsInFlight past the newest a sender may have handed out will
  // never come: FailedPrecondition at once, without waiting (before
  // anything is staged or packed every version is waited for). So the
  // version after the one a receiver holds is never refused.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<const BucketSet>> WaitFor(int64_t min_version,
                                                                         absl::Time deadline);

  // The same, but a version still being packed qualifies too: its buckets
  // are read as they are packed (StreamedVersion).
  [[nodiscard]] absl::StatusOr<StreamedVersion> WaitForStream(int64_t min_version,
                                                              absl::Time deadline);

  // The newest staged version, or -1.
  int64_t newest_version();

  // The bytes of the buckets held here: the staged version's and the one
  // being packed.
  int64_t StagedBytes();

  // Wakes every waiter and makes later waits return Cancelled.
  void Close();

  // Flips every bit of byte `byte % size` of bucket `bucket` of the staged
  // version in place (its checksum is left alone). FailedPrecondition when
  // nothing is staged, OutOfRange for a missing or empty bucket.
  [[nodiscard]] absl::Status Corrupt(int bucket, int64_t byte);

 private:
  // Waits as WaitFor; `streamed` admits the version being packed.
  absl::StatusOr<StreamedVersion> Wait(int64_t min_version, absl::Time deadline, bool streamed);
  bool ReadyLocked(int64_t min_version, bool streamed) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The newest version a sender may have handed out, whole or streamed: the
  // staged one or the one being packed; what refusals count from.
  std::optional<int64_t> NewestServableLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckVersionLocked(int64_t version) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string name_;
  const int64_t bucket_bytes_;
  const int slots_;
  // Serializes Stage.
  absl::Mutex stage_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  absl::Mutex mu_;
  absl::CondVar staged_cv_;
  // The newest version staged (even while its buckets are reused).
  std::optional<int64_t> newest_ ABSL_GUARDED_BY(mu_);
  // The newest version packed in full, and the one being packed.
  std::shared_ptr<BucketSet> latest_ ABSL_GUARDED_BY(mu_);
  // Whether latest_ was packed in full (not sent in place).
  bool latest_whole_ ABSL_GUARDED_BY(mu_) = false;
  StreamedVersion packing_ ABSL_GUARDED_BY(mu_);
  // The versions the senders waiting in WaitForStream ask for.
  std::multiset<int64_t> streaming_ ABSL_GUARDED_BY(mu_);
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
