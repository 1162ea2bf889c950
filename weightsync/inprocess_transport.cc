// The in-process transport: the publisher packs and checksums the buckets
// once and swaps them in under a mutex; every receiver verifies and copies
// from that shared, immutable set. Only the newest version is kept.

#include <chrono>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "weightsync/internal/bucket_set.h"
#include "weightsync/internal/inprocess_testing.h"
#include "weightsync/transport.h"

namespace trellis::weightsync {
namespace {

using internal::BucketSet;

class Stopwatch {
 public:
  double Seconds() const {
    return std::chrono::duration<double>(Clock::now() - start_).count();
  }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_ = Clock::now();
};

v1::WeightSyncStats BaseStats(const BucketSet& set) {
  v1::WeightSyncStats stats;
  stats.set_version(set.version);
  stats.set_bytes(set.payload_bytes());
  stats.set_tensors(static_cast<int32_t>(set.manifest.size()));
  stats.set_buckets(static_cast<int32_t>(set.buckets.size()));
  return stats;
}

}  // namespace

class InProcessTransport final : public Transport {
 public:
  explicit InProcessTransport(TransportOptions options) : options_(options) {}

  absl::StatusOr<v1::WeightSyncStats> Publish(
      int64_t version, const NamedTensors& tensors) override {
    {
      absl::MutexLock lock(&mu_);
      if (absl::Status s = CheckVersionLocked(version); !s.ok()) return s;
    }
    // gather: packing the tensors into buckets.
    Stopwatch gather;
    absl::StatusOr<BucketSet> packed =
        internal::PackBuckets(tensors, options_.bucket_bytes);
    if (!packed.ok()) return packed.status();
    const double gather_seconds = gather.Seconds();

    // transfer: checksumming and handing the buckets over.
    Stopwatch transfer;
    auto set = std::make_shared<BucketSet>(*std::move(packed));
    set->version = version;
    internal::ComputeChecksums(*set);
    v1::WeightSyncStats stats = BaseStats(*set);
    {
      absl::MutexLock lock(&mu_);
      // A concurrent publisher may have won the race since the first check.
      if (absl::Status s = CheckVersionLocked(version); !s.ok()) return s;
      latest_ = std::move(set);
      published_cv_.SignalAll();
    }
    stats.set_gather_seconds(gather_seconds);
    stats.set_transfer_seconds(transfer.Seconds());
    return stats;
  }

  absl::StatusOr<v1::WeightSyncStats> Receive(int64_t min_version,
                                              const NamedTensors& dst,
                                              absl::Duration timeout) override {
    std::shared_ptr<const BucketSet> set;
    {
      const absl::Time deadline = absl::Now() + timeout;
      absl::MutexLock lock(&mu_);
      while (!ReadyLocked(min_version)) {
        if (published_cv_.WaitWithDeadline(&mu_, deadline)) break;
      }
      if (!ReadyLocked(min_version)) {
        return absl::DeadlineExceededError(absl::StrCat(
            "weightsync inprocess: waited ", absl::FormatDuration(timeout),
            " for weights version >= ", min_version, "; newest published: ",
            latest_ ? absl::StrCat(latest_->version) : std::string("none")));
      }
      set = latest_;
    }
    // transfer: verifying the buckets we read.
    Stopwatch transfer;
    if (absl::Status s = internal::VerifyChecksums(*set); !s.ok()) return s;
    const double transfer_seconds = transfer.Seconds();
    if (absl::Status s = internal::CheckMatches(*set, dst); !s.ok()) return s;
    // load: copying into the receiver's tensors.
    Stopwatch load;
    if (absl::Status s = internal::LoadInto(*set, dst); !s.ok()) return s;
    v1::WeightSyncStats stats = BaseStats(*set);
    stats.set_transfer_seconds(transfer_seconds);
    stats.set_load_seconds(load.Seconds());
    return stats;
  }

  absl::Status Corrupt(int bucket, int64_t byte) {
    absl::MutexLock lock(&mu_);
    if (latest_ == nullptr) {
      return absl::FailedPreconditionError("weightsync: nothing published");
    }
    if (bucket < 0 || bucket >= static_cast<int>(latest_->buckets.size()) ||
        latest_->buckets[bucket].numel() == 0) {
      return absl::OutOfRangeError(absl::StrCat(
          "weightsync: version ", latest_->version, " has no bytes in bucket ",
          bucket, " (", latest_->buckets.size(), " buckets)"));
    }
    at::Tensor& b = latest_->buckets[bucket];
    uint8_t* p = b.data_ptr<uint8_t>();
    p[byte % b.numel()] ^= 0xFF;
    return absl::OkStatus();
  }

 private:
  absl::Status CheckVersionLocked(int64_t version) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (latest_ != nullptr && version <= latest_->version) {
      return absl::FailedPreconditionError(absl::StrCat(
          "weightsync inprocess: version ", version,
          " must exceed the last published version ", latest_->version));
    }
    return absl::OkStatus();
  }

  bool ReadyLocked(int64_t min_version) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return latest_ != nullptr && latest_->version >= min_version;
  }

  const TransportOptions options_;
  absl::Mutex mu_;
  absl::CondVar published_cv_;
  // Immutable once published (but for CorruptBucketForTesting).
  std::shared_ptr<BucketSet> latest_ ABSL_GUARDED_BY(mu_);
};

std::unique_ptr<Transport> NewInProcessTransport(TransportOptions options) {
  return std::make_unique<InProcessTransport>(options);
}

namespace internal {

absl::Status CorruptBucketForTesting(Transport& transport, int bucket,
                                     int64_t byte) {
  auto* inprocess = dynamic_cast<InProcessTransport*>(&transport);
  if (inprocess == nullptr) {
    return absl::InvalidArgumentError(
        "CorruptBucketForTesting: not an in-process transport");
  }
  return inprocess->Corrupt(bucket, byte < 0 ? 0 : byte);
}

}  // namespace internal
}  // namespace trellis::weightsync
