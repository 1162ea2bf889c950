#ifndef TRELLIS_WEIGHTSYNC_INTERNAL_SEGMENT_IO_H_
#define TRELLIS_WEIGHTSYNC_INTERNAL_SEGMENT_IO_H_

// What both streaming socket transports (gloo, tcp) do with a version's
// wire segments (wire.h Segments): the sender finds each segment's bytes,
// in its bucket or in place in the published tensors, and both ends
// checksum a bucket as its segments go by, the padding between tensors
// counted as the zeros it is.

#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "weightsync/internal/checksum.h"
#include "weightsync/internal/staging.h"
#include "weightsync/internal/wire.h"

namespace trellis::weightsync::internal {

// The checksum of one bucket, fed its tensors' bytes front to back.
class BucketSum {
 public:
  // Feeds the `n` bytes at `data`, which lie at `offset` in the bucket,
  // after zeros from the end of what was fed before. DataLoss naming
  // `what` when `offset` lies before that end (overlapping tensors).
  [[nodiscard]] absl::Status Add(int64_t offset, const void* data, int64_t n, const char* what);
  // The bucket's checksum, zeros filling it up to `size` bytes; then starts
  // over for the next bucket.
  uint64_t Finish(int64_t size);

 private:
  void Zeros(int64_t n);

  Checksum64Stream sum_;
  int64_t cursor_ = 0;
};

// Every bucket's checksum as a version's segments land in its buckets, in
// wire order (Segments).
class ReceivedSums {
 public:
  explicit ReceivedSums(const BucketSet& set) : set_(set), got_(set.buckets.size()) {}
  // Segment `g` is in its bucket, or at `data` (received in place). DataLoss
  // when it overlaps the last one.
  [[nodiscard]] absl::Status Add(const WireSegment& g, const void* data = nullptr);
  // Once every segment landed and `set.checksums` holds the sender's: OK,
  // or DataLoss naming the first bucket whose checksum failed.
  [[nodiscard]] absl::Status Verify();

 private:
  // Finishes the buckets before `upto`.
  void Settle(size_t upto);

  const BucketSet& set_;
  std::vector<uint64_t> got_;
  BucketSum sum_;
  size_t bucket_ = 0;
};

// A sender's side of one version: streams its segments of at most
// `segment_bytes` in wire order (Segments). For each it waits until the
// bytes are readable (by `deadline`), finds them (its bucket's, or the
// published tensor's in place: one run, or a row each of a strided view's
// rows), feeds them to their bucket's checksum when that bucket is not
// packed whole (sent in place or while packed), and hands them to
// send(m, g, runs), which may use up `runs`, m counting the segments from
// 0. Returns every bucket's checksum (the packer's for a bucket packed
// whole), or the first error (the packing's, DeadlineExceeded, or send's).
using SendSegment =
    std::function<absl::Status(size_t m, const WireSegment& g, std::vector<iovec>& runs)>;
[[nodiscard]] absl::StatusOr<std::vector<uint64_t>> StreamVersion(const StreamedVersion& version,
                                                                  int64_t segment_bytes,
                                                                  absl::Time deadline,
                                                                  const SendSegment& send);

}  // namespace trellis::weightsync::internal

#endif  // TRELLIS_WEIGHTSYNC_INTERNAL_SEGMENT_IO_H_
