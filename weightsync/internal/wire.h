#ifndef TRELLIS_WEIGHTSYNC_INTERNAL_WIRE_H_
#define TRELLIS_WEIGHTSYNC_INTERNAL_WIRE_H_

// What the network transports send ahead of a version's buckets: its
// manifest, bucket sizes and checksums (v1::WeightsHeader), and the
// receiver's side of it: empty buckets to receive into.

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "trellis/v1/weights.pb.h"
#include "weightsync/internal/bucket_set.h"

namespace trellis::weightsync::internal {

v1::WeightsHeader EncodeHeader(const BucketSet& set);

// A BucketSet with `header`'s version, manifest and checksums and
// uninitialized CPU byte buckets of the announced sizes, reusing free
// buckets of `spare` of the same size (receivers keep their last buckets,
// which saves faulting in fresh pages every time). Returns DataLoss
// when the header is inconsistent (a tensor outside its bucket, an unknown
// dtype, checksums that do not match the bucket count, more than
// `max_total_bytes` in all).
// A spare bucket is free when nothing else holds its memory: a receiver's
// dst may have adopted it (LoadInto with adopt).
[[nodiscard]] absl::StatusOr<BucketSet> DecodeHeader(
    const v1::WeightsHeader& header,
    const std::vector<at::Tensor>* spare = nullptr,
    int64_t max_total_bytes = int64_t{1} << 42);

// The receive buffers of the last two versions, for DecodeHeader: with
// adopted buckets, version v's memory is in use while v+1 arrives, and free
// again (reusable) by v+2.
class SparePool {
 public:
  const std::vector<at::Tensor>* buckets() const { return &all_; }
  void Remember(const std::vector<at::Tensor>& newest) {
    previous_ = std::move(newest_);
    newest_ = newest;
    all_ = newest_;
    all_.insert(all_.end(), previous_.begin(), previous_.end());
  }

 private:
  std::vector<at::Tensor> newest_, previous_, all_;
};

}  // namespace trellis::weightsync::internal

#endif  // TRELLIS_WEIGHTSYNC_INTERNAL_WIRE_H_
