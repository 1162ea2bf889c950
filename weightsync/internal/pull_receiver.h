#ifndef TRELLIS_WEIGHTSYNC_INTERNAL_PULL_RECEIVER_H_
#define TRELLIS_WEIGHTSYNC_INTERNAL_PULL_RECEIVER_H_

// The receiving end that the network transports (gloo, grpc, nccl) share,
// as a template method: Receive serializes calls, asks the transport to
// Fetch one version against the deadline, names the wait in every link
// failure (dropping the link), and finishes the same way for all: the
// checksums' verdict, then an all-or-nothing load into dst that adopts the
// receiver's own buckets (FinishReceive with the SparePool), or copies from
// the publisher's borrowed ones and hands them back (cuda_ipc).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "weightsync/internal/bucket_set.h"
#include "weightsync/internal/wire.h"
#include "weightsync/transport.h"

namespace trellis::weightsync::internal {

class PullReceiver : public Receiver {
 public:
  absl::StatusOr<v1::WeightSyncStats> Receive(int64_t min_version, const NamedTensors& dst,
                                              absl::Duration timeout) final;

  // The bytes of the buckets kept for the next versions (SparePool).
  int64_t SpareBytes();

 protected:
  // `name` starts the errors ("weightsync gloo receiver 0"); `source` names
  // the publisher ("10.0.0.7:29500").
  PullReceiver(std::string name, std::string source);

  struct Fetched {
    BucketSet set;  // Its buckets come from DecodeHeader(header, spare()).
    // From the answer's arrival to the last bucket received and verified.
    double transfer_seconds = 0;
    // OK, or DataLoss naming the first bucket whose checksum failed.
    absl::Status verified;
    // The buckets are the publisher's memory, read in place (cuda_ipc)
    // rather than the receiver's own: never adopted into dst nor kept, and
    // handed back (GiveBack) once the load is over.
    bool borrowed = false;
  };

  // One request for a version >= `min_version` and its answer, by
  // `deadline`. Sets *in_step once the publisher's answer arrived in full
  // (its error, or every bucket), so that the link stays usable: such an
  // error is returned as it is. An error before is a link failure: Receive
  // calls Disconnect() and names the wait in it (DeadlineExceeded when the
  // error is DeadlineExceeded or Cancelled or the deadline has passed).
  virtual absl::StatusOr<Fetched> Fetch(int64_t min_version, absl::Time deadline, bool* in_step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;

  // Drops the link after a link failure; the next Fetch reconnects.
  virtual void Disconnect() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {}

  // Called after the load from a borrowed set, whether it succeeded or not:
  // the publisher may reuse the buckets once this returns.
  virtual void GiveBack() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {}

  // The receiver's buckets of the last two versions, for DecodeHeader.
  const std::vector<at::Tensor>* spare() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return spare_.buckets();
  }

  // During Fetch: the dst tensors Receive was given, for a transport that
  // receives into them in place (TransportOptions::receive_in_place).
  const NamedTensors& dst() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return *dst_; }

  absl::Mutex mu_;

 private:
  const std::string name_;
  const std::string source_;
  SparePool spare_ ABSL_GUARDED_BY(mu_);
  const NamedTensors* dst_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace trellis::weightsync::internal

#endif  // TRELLIS_WEIGHTSYNC_INTERNAL_PULL_RECEIVER_H_
