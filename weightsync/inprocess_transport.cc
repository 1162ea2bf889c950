// The in-process transport: the publisher packs and checksums the buckets
// once and stages them (internal/staging.h); every receiver verifies and
// copies from that shared, immutable set. Only the newest version is kept.

#include "weightsync/inprocess_transport.h"

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "weightsync/internal/bucket_set.h"
#include "weightsync/internal/staging.h"
#include "weightsync/registry.h"

namespace trellis::weightsync {
namespace {

using internal::BucketSet;
using internal::Stopwatch;
using internal::VersionStage;

constexpr char kName[] = "weightsync inprocess";

class InProcessReceiver final : public Receiver {
 public:
  explicit InProcessReceiver(std::shared_ptr<VersionStage> stage) : stage_(std::move(stage)) {}

  absl::StatusOr<v1::WeightSyncStats> Receive(int64_t min_version, const NamedTensors& dst,
                                              absl::Duration timeout) override {
    absl::StatusOr<std::shared_ptr<const BucketSet>> set =
        stage_->WaitFor(min_version, absl::Now() + timeout);
    if (absl::IsCancelled(set.status())) {
      return absl::UnavailableError(
          absl::StrCat(kName, ": no version >= ", min_version, " and the publisher is gone"));
    }
    if (!set.ok()) return set.status();
    // transfer: verifying the buckets we read.
    Stopwatch transfer;
    if (absl::Status s = internal::VerifyChecksums(**set); !s.ok()) return s;
    const double transfer_seconds = transfer.Seconds();
    // The staged buckets are the publisher's: copied, never adopted.
    return internal::FinishReceive(**set, dst, transfer_seconds);
  }

 private:
  const std::shared_ptr<VersionStage> stage_;
};

class InProcessPublisherImpl final : public InProcessPublisher, public internal::StagedSender {
 public:
  explicit InProcessPublisherImpl(const TransportOptions& options)
      : stage_(std::make_shared<VersionStage>(kName, options.bucket_bytes)),
        link_(std::make_shared<std::shared_ptr<VersionStage>>(stage_)) {}
  ~InProcessPublisherImpl() override { stage_->Close(); }

  absl::StatusOr<v1::WeightSyncStats> Publish(int64_t version,
                                              const NamedTensors& tensors) override {
    return stage_->Stage(version, tensors);
  }

  std::unique_ptr<Receiver> NewReceiver() override {
    return std::make_unique<InProcessReceiver>(stage_);
  }

  VersionStage* stage() override { return stage_.get(); }
  // Lives exactly as long as this publisher (receivers share the stage
  // alone): a registry's hub finds live publishers through it.
  std::weak_ptr<std::shared_ptr<VersionStage>> link() const { return link_; }

 private:
  const std::shared_ptr<VersionStage> stage_;
  const std::shared_ptr<std::shared_ptr<VersionStage>> link_;
};

// The live publishers a registry made, by address, for its receivers.
class Hub {
 public:
  absl::StatusOr<std::unique_ptr<Publisher>> NewPublisher(const TransportOptions& options) {
    absl::MutexLock lock(&mu_);
    std::weak_ptr<std::shared_ptr<VersionStage>>& slot = publishers_[Address(options)];
    if (!slot.expired()) {
      return absl::AlreadyExistsError(
          absl::StrCat(kName, ": a publisher at ", Address(options), " is live already"));
    }
    auto publisher = std::make_unique<InProcessPublisherImpl>(options);
    slot = publisher->link();
    return std::unique_ptr<Publisher>(std::move(publisher));
  }

  absl::StatusOr<std::unique_ptr<Receiver>> NewReceiver(const TransportOptions& options) {
    absl::MutexLock lock(&mu_);
    auto it = publishers_.find(Address(options));
    std::shared_ptr<std::shared_ptr<VersionStage>> link =
        it == publishers_.end() ? nullptr : it->second.lock();
    if (link == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          kName, ": no live publisher at ", Address(options), " (make the publisher first)"));
    }
    return std::unique_ptr<Receiver>(std::make_unique<InProcessReceiver>(*link));
  }

 private:
  static std::string Address(const TransportOptions& options) {
    return absl::StrCat(options.host, ":", options.port);
  }

  absl::Mutex mu_;
  std::map<std::string, std::weak_ptr<std::shared_ptr<VersionStage>>> publishers_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<InProcessPublisher> NewInProcessPublisher(const TransportOptions& options) {
  return std::make_unique<InProcessPublisherImpl>(options);
}

absl::Status RegisterInProcessTransport(TransportRegistry& registry) {
  auto hub = std::make_shared<Hub>();
  return registry.Register(
      "inprocess", [hub](const TransportOptions& options) { return hub->NewPublisher(options); },
      [hub](const TransportOptions& options) { return hub->NewReceiver(options); });
}

}  // namespace trellis::weightsync
