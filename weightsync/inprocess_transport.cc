// The in-process transport: the publisher packs and checksums the buckets
// once and stages them (internal/staging.h); every receiver verifies and
// copies from that shared, immutable set. Only the newest version is kept.

#include <memory>
#include <utility>

#include "absl/time/clock.h"
#include "weightsync/internal/bucket_set.h"
#include "weightsync/internal/staging.h"
#include "weightsync/transport.h"

namespace trellis::weightsync {
namespace {

using internal::BucketSet;
using internal::Stopwatch;

class InProcessTransport final : public Transport, public internal::StagedSender {
 public:
  explicit InProcessTransport(TransportOptions options)
      : stage_("weightsync inprocess", options.bucket_bytes) {}

  absl::StatusOr<v1::WeightSyncStats> Publish(
      int64_t version, const NamedTensors& tensors) override {
    return stage_.Stage(version, tensors);
  }

  absl::StatusOr<v1::WeightSyncStats> Receive(int64_t min_version,
                                              const NamedTensors& dst,
                                              absl::Duration timeout) override {
    absl::StatusOr<std::shared_ptr<const BucketSet>> set =
        stage_.WaitFor(min_version, absl::Now() + timeout);
    if (!set.ok()) return set.status();
    // transfer: verifying the buckets we read.
    Stopwatch transfer;
    if (absl::Status s = internal::VerifyChecksums(**set); !s.ok()) return s;
    const double transfer_seconds = transfer.Seconds();
    // The staged buckets are the sender's: copied, never adopted.
    return internal::FinishReceive(**set, dst, transfer_seconds);
  }

  internal::VersionStage* stage() override { return &stage_; }

 private:
  internal::VersionStage stage_;
};

}  // namespace

std::unique_ptr<Transport> NewInProcessTransport(TransportOptions options) {
  return std::make_unique<InProcessTransport>(options);
}

}  // namespace trellis::weightsync
