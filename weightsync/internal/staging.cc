#include "weightsync/internal/staging.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "weightsync/internal/inprocess_testing.h"

namespace trellis::weightsync::internal {

v1::WeightSyncStats BaseStats(const BucketSet& set) {
  v1::WeightSyncStats stats;
  stats.set_version(set.version);
  stats.set_bytes(set.payload_bytes());
  stats.set_tensors(static_cast<int32_t>(set.manifest.size()));
  stats.set_buckets(static_cast<int32_t>(set.buckets.size()));
  return stats;
}

absl::StatusOr<v1::WeightSyncStats> FinishReceive(const BucketSet& set, const NamedTensors& dst,
                                                  double transfer_seconds,
                                                  const std::vector<at::Tensor>* owned) {
  if (absl::Status s = CheckMatches(set, dst); !s.ok()) return s;
  Stopwatch load;
  if (absl::Status s = LoadInto(set, dst, owned); !s.ok()) return s;
  v1::WeightSyncStats stats = BaseStats(set);
  stats.set_transfer_seconds(transfer_seconds);
  stats.set_load_seconds(load.Seconds());
  return stats;
}

bool PackProgress::Packing(size_t i, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  if (in_place_) return false;
  current_ = i;
  current_bytes_ = bytes;
  in_place_ = slots_ > 0 && attached_ >= slots_;
  return !in_place_;
}

void PackProgress::Packed(size_t n) {
  absl::MutexLock lock(&mu_);
  packed_ = n;
}

void PackProgress::Fail(absl::Status error) {
  absl::MutexLock lock(&mu_);
  failed_ = std::move(error);
}

bool PackProgress::ReadyLocked(size_t i, int64_t bytes) const {
  return packed_ > i || (bytes >= 0 && current_ == i && current_bytes_ >= bytes);
}

absl::Status PackProgress::WaitPacked(size_t i, absl::Time deadline, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  auto done = [&]()
                  ABSL_NO_THREAD_SAFETY_ANALYSIS { return ReadyLocked(i, bytes) || !failed_.ok(); };
  if (!mu_.AwaitWithDeadline(absl::Condition(&done), deadline)) {
    return absl::DeadlineExceededError(
        absl::StrCat("bucket ", i, " of ", buckets_, " was not packed in time"));
  }
  return ReadyLocked(i, bytes) ? absl::OkStatus() : failed_;
}

absl::StatusOr<PackProgress::From> PackProgress::WaitReadable(size_t i, absl::Time deadline,
                                                              int64_t end) {
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return ReadyLocked(i, end) || in_place_ || !failed_.ok();
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&done), deadline)) {
    return absl::DeadlineExceededError(
        absl::StrCat("bucket ", i, " of ", buckets_, " was not packed in time"));
  }
  if (ReadyLocked(i, end)) return From::kBucket;
  if (in_place_) return From::kTensors;
  return failed_;
}

bool PackProgress::Whole(size_t i) {
  absl::MutexLock lock(&mu_);
  return packed_ > i;
}

void PackProgress::Attach() {
  absl::MutexLock lock(&mu_);
  ++attached_;
}

void PackProgress::Detach() {
  absl::MutexLock lock(&mu_);
  --attached_;
}

bool PackProgress::in_place() {
  absl::MutexLock lock(&mu_);
  return in_place_;
}

void PackProgress::AwaitDetached() {
  absl::MutexLock lock(&mu_);
  auto none = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return attached_ == 0; };
  mu_.Await(absl::Condition(&none));
}

VersionStage::VersionStage(std::string name, int64_t bucket_bytes, int slots)
    : name_(std::move(name)), bucket_bytes_(bucket_bytes), slots_(slots) {}

absl::StatusOr<v1::WeightSyncStats> VersionStage::Stage(int64_t version,
                                                        const NamedTensors& tensors) {
  absl::MutexLock stage_lock(&stage_mu_);
  // gather: planning, then copying bucket by bucket; transfer: checksumming.
  Stopwatch plan;
  std::vector<at::Tensor> spare;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = CheckVersionLocked(version); !s.ok()) return s;
    // The staged version's buckets, when nothing else holds them: waiters
    // for it get this version instead, which satisfies them as well.
    if (latest_ != nullptr && latest_.use_count() == 1) {
      spare = std::move(latest_->buckets);
      latest_.reset();
    }
  }
  absl::StatusOr<BucketSet> planned = PlanBuckets(tensors, bucket_bytes_, &spare);
  if (!planned.ok()) return planned.status();
  auto set = std::make_shared<BucketSet>(*std::move(planned));
  set->version = version;
  const bool readable = std::all_of(tensors.begin(), tensors.end(), [](const auto& named) {
    return ReadableInPlace(named.second);
  });
  auto progress = std::make_shared<PackProgress>(set->buckets.size(), readable ? slots_ : 0);
  PackSeconds seconds;
  seconds.copy = plan.Seconds();
  {
    absl::MutexLock lock(&mu_);
    packing_ = {set, progress, std::make_shared<const NamedTensors>(tensors), nullptr};
    staged_cv_.SignalAll();
    // The senders already waiting for it take it (attach) before anything
    // is packed: when they are all the slots, nothing is.
    auto taken = [this, version, readable]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return !readable || slots_ == 0 || streaming_.empty() || *streaming_.begin() > version;
    };
    mu_.Await(absl::Condition(&taken));
  }
  for (size_t i = 0; i < set->buckets.size() && progress->Packing(i, 0); ++i) {
    auto packing = [&progress, i](int64_t bytes) { return progress->Packing(i, bytes); };
    if (absl::Status s = PackBucket(*set, tensors, i, &seconds, packing); !s.ok()) {
      progress->Fail(s);
      absl::MutexLock lock(&mu_);
      packing_ = {};
      return s;
    }
    if (progress->in_place()) break;
    progress->Packed(i + 1);
  }
  const bool whole = !progress->in_place();
  v1::WeightSyncStats stats = BaseStats(*set);
  {
    absl::MutexLock lock(&mu_);
    newest_ = version;
    latest_ = std::move(set);
    latest_whole_ = whole;
    packing_ = {};
    staged_cv_.SignalAll();
  }
  // The senders streaming it read `tensors` until they are done.
  if (!whole) progress->AwaitDetached();
  stats.set_gather_seconds(seconds.copy);
  stats.set_transfer_seconds(seconds.checksum);
  return stats;
}

absl::StatusOr<std::shared_ptr<const BucketSet>> VersionStage::WaitFor(int64_t min_version,
                                                                       absl::Time deadline) {
  absl::StatusOr<StreamedVersion> got = Wait(min_version, deadline, /*streamed=*/false);
  if (!got.ok()) return got.status();
  return got->set;
}

absl::StatusOr<StreamedVersion> VersionStage::WaitForStream(int64_t min_version,
                                                            absl::Time deadline) {
  return Wait(min_version, deadline, /*streamed=*/true);
}

absl::StatusOr<StreamedVersion> VersionStage::Wait(int64_t min_version, absl::Time deadline,
                                                   bool streamed) {
  const absl::Time start = absl::Now();
  absl::MutexLock lock(&mu_);
  if (const std::optional<int64_t> newest = NewestServableLocked();
      newest.has_value() && min_version > *newest + kVersionsInFlight) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": weights version >= ", min_version,
                     " will never be published: the newest is ", *newest,
                     " and the sender publishes one version at a time (a receiver may ask "
                     "for at most the next, ",
                     *newest + kVersionsInFlight, ")"));
  }
  if (streamed) streaming_.insert(min_version);
  while (!ReadyLocked(min_version, streamed) && !closed_) {
    if (staged_cv_.WaitWithDeadline(&mu_, deadline)) break;
  }
  if (streamed) streaming_.erase(streaming_.find(min_version));
  if (latest_ != nullptr && latest_whole_ && latest_->version >= min_version) {
    auto packed = std::make_shared<PackProgress>(latest_->buckets.size());
    packed->Packed(latest_->buckets.size());
    return StreamedVersion{latest_, std::move(packed), nullptr, nullptr};
  }
  if (ReadyLocked(min_version, streamed)) {
    StreamedVersion v = packing_;
    v.progress->Attach();
    v.attached =
        std::shared_ptr<void>(nullptr, [progress = v.progress](void*) { progress->Detach(); });
    return v;
  }
  if (closed_) {
    return absl::CancelledError(absl::StrCat(name_, ": the sender is closing"));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      name_, ": waited ", absl::FormatDuration(absl::Now() - start),
      " for weights version >= ", min_version,
      "; newest published: ", newest_.has_value() ? absl::StrCat(*newest_) : std::string("none"),
      latest_ != nullptr && !latest_whole_
          ? " (sent in place to the receivers that streamed it, not kept: the next is served)"
          : ""));
}

int64_t VersionStage::newest_version() {
  absl::MutexLock lock(&mu_);
  return newest_.value_or(-1);
}

int64_t VersionStage::StagedBytes() {
  absl::MutexLock lock(&mu_);
  int64_t bytes = 0;
  for (const BucketSet* set : {static_cast<const BucketSet*>(latest_.get()), packing_.set.get()}) {
    if (set == nullptr) continue;
    for (const at::Tensor& b : set->buckets) bytes += b.numel();
  }
  return bytes;
}

void VersionStage::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
  staged_cv_.SignalAll();
}

absl::Status VersionStage::Corrupt(int bucket, int64_t byte) {
  absl::MutexLock lock(&mu_);
  if (latest_ == nullptr || !latest_whole_) {
    return absl::FailedPreconditionError(absl::StrCat(name_, ": nothing staged whole"));
  }
  if (bucket < 0 || bucket >= static_cast<int>(latest_->buckets.size()) ||
      latest_->buckets[bucket].numel() == 0) {
    return absl::OutOfRangeError(absl::StrCat(name_, ": version ", latest_->version,
                                              " has no bytes in bucket ", bucket, " (",
                                              latest_->buckets.size(), " buckets)"));
  }
  at::Tensor& b = latest_->buckets[bucket];
  uint8_t* p = b.data_ptr<uint8_t>();
  p[byte % b.numel()] ^= 0xFF;
  return absl::OkStatus();
}

std::optional<int64_t> VersionStage::NewestServableLocked() const {
  // A streaming sender hands out the version being packed, so its receiver
  // may hold all of it before Stage records it in newest_. On a loaded
  // machine: Stage(24) marks the last bucket packed (PackProgress::Packed)
  // and is preempted; the gloo sender sends the checksums, the receiver
  // holds 24 and asks for 25, and newest_ still says 23, so 25 was refused
  // as never to be published. Counting packing_ too, the refusal never lags
  // what a receiver holds: packing_ is set (under mu_) before any sender
  // can hand the version out, and cleared only where newest_ takes it over
  // in the same critical section, or when packing failed and no receiver
  // got all of it.
  std::optional<int64_t> newest = newest_;
  if (packing_.set != nullptr && (!newest.has_value() || packing_.set->version > *newest)) {
    newest = packing_.set->version;
  }
  return newest;
}

bool VersionStage::ReadyLocked(int64_t min_version, bool streamed) const {
  return (latest_ != nullptr && latest_whole_ && latest_->version >= min_version) ||
         (streamed && packing_.set != nullptr && packing_.set->version >= min_version);
}

absl::Status VersionStage::CheckVersionLocked(int64_t version) const {
  if (newest_.has_value() && version <= *newest_) {
    return absl::FailedPreconditionError(absl::StrCat(
        name_, ": version ", version, " must exceed the last published version ", *newest_));
  }
  return absl::OkStatus();
}

absl::Status CorruptBucketForTesting(Publisher& publisher, int bucket, int64_t byte) {
  auto* staged = dynamic_cast<StagedSender*>(&publisher);
  if (staged == nullptr || staged->stage() == nullptr) {
    return absl::InvalidArgumentError(
        "CorruptBucketForTesting: not a publisher that stages its versions");
  }
  return staged->stage()->Corrupt(bucket, byte < 0 ? 0 : byte);
}

}  // namespace trellis::weightsync::internal
