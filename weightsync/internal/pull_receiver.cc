#include "weightsync/internal/pull_receiver.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "weightsync/internal/staging.h"

namespace trellis::weightsync::internal {

PullReceiver::PullReceiver(std::string name, std::string source)
    : name_(std::move(name)), source_(std::move(source)) {}

absl::StatusOr<v1::WeightSyncStats> PullReceiver::Receive(int64_t min_version,
                                                          const NamedTensors& dst,
                                                          absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout;
  bool in_step = false;
  dst_ = &dst;
  absl::StatusOr<Fetched> fetched = Fetch(min_version, deadline, &in_step);
  dst_ = nullptr;
  if (!fetched.ok()) {
    if (in_step) return fetched.status();
    Disconnect();
    const absl::Status& s = fetched.status();
    const absl::Time now = absl::Now();
    const std::string what =
        absl::StrCat(name_, ": waited ", absl::FormatDuration(now - start),
                     " for weights version >= ", min_version, " from ", source_, ": ", s.message());
    if (absl::IsDeadlineExceeded(s) || absl::IsCancelled(s) || now >= deadline) {
      return absl::DeadlineExceededError(what);
    }
    return absl::Status(s.code(), what);
  }
  if (fetched->borrowed) {
    absl::StatusOr<v1::WeightSyncStats> stats =
        fetched->verified.ok() ? FinishReceive(fetched->set, dst, fetched->transfer_seconds)
                               : fetched->verified;
    GiveBack();
    return stats;
  }
  spare_.Remember(fetched->set.buckets);
  if (!fetched->verified.ok()) return fetched->verified;
  // The buckets are this receiver's own (spare_ reuses only free ones).
  return FinishReceive(fetched->set, dst, fetched->transfer_seconds, spare_.buckets());
}

int64_t PullReceiver::SpareBytes() {
  absl::MutexLock lock(&mu_);
  int64_t bytes = 0;
  for (const at::Tensor& b : *spare_.buckets()) bytes += b.numel();
  return bytes;
}

}  // namespace trellis::weightsync::internal
