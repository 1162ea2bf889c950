#ifndef TRELLIS_WEIGHTSYNC_INTERNAL_WIRE_H_
#define TRELLIS_WEIGHTSYNC_INTERNAL_WIRE_H_

// What the network transports send ahead of a version's buckets: its
// manifest, bucket sizes and checksums (v1::WeightsHeader), and the
// receiver's side of it: empty buckets to receive into.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "trellis/v1/weights.pb.h"
#include "weightsync/internal/bucket_set.h"

namespace trellis::weightsync::internal {

// Without `with_checksums` every checksum is sent as 0: a transport that
// streams a version while it is packed sends them after the buckets.
v1::WeightsHeader EncodeHeader(const BucketSet& set, bool with_checksums = true);

// One message of a version's bytes: `nbytes` bytes at `offset` in bucket
// `bucket`, all of manifest entry `entry`'s. The padding between tensors
// never travels: it is zero on both ends.
struct WireSegment {
  size_t bucket = 0;
  size_t entry = 0;
  int64_t offset = 0;
  int64_t nbytes = 0;
};

// Every non-empty tensor of `set`, by bucket and then offset, cut into
// messages of at most `max_bytes`: what both ends of a streaming transport
// send and receive, in that order.
std::vector<WireSegment> Segments(const BucketSet& set, int64_t max_bytes);

inline constexpr int64_t kMaxAnnouncedBytes = int64_t{1} << 42;

// A BucketSet with `header`'s version, manifest and checksums and no
// buckets yet (the sizes are header.bucket_bytes()). Returns DataLoss when
// the header is inconsistent (a tensor outside its bucket, an unknown dtype,
// checksums that do not match the bucket count, more than `max_total_bytes`
// in all).
[[nodiscard]] absl::StatusOr<BucketSet> DecodeLayout(const v1::WeightsHeader& header,
                                                     int64_t max_total_bytes = kMaxAnnouncedBytes);

// DecodeLayout, with uninitialized CPU byte buckets of the announced sizes
// (AllocateBuckets with `spare`: receivers keep their last buckets,
// SparePool); ResourceExhausted when they cannot be allocated.
[[nodiscard]] absl::StatusOr<BucketSet> DecodeHeader(const v1::WeightsHeader& header,
                                                     const std::vector<at::Tensor>* spare = nullptr,
                                                     int64_t max_total_bytes = kMaxAnnouncedBytes);

}  // namespace trellis::weightsync::internal

#endif  // TRELLIS_WEIGHTSYNC_INTERNAL_WIRE_H_
