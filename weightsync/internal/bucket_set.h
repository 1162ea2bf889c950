#ifndef TRELLIS_WEIGHTSYNC_INTERNAL_BUCKET_SET_H_
#define TRELLIS_WEIGHTSYNC_INTERNAL_BUCKET_SET_H_

// A versioned set of named tensors packed into flat, checksummed byte
// buckets: the unit every transport moves. Packing, verification and the
// all-or-nothing load live here so that each transport only moves buckets.

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "weightsync/transport.h"

namespace trellis::weightsync::internal {

// Where one tensor lives inside the buckets.
struct ManifestEntry {
  std::string name;
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  int bucket = 0;
  int64_t offset = 0;  // Bytes from the bucket's start; kAlignment-aligned.
  int64_t nbytes = 0;
  // A receiver wrote its bytes straight into the dst tensor of its name
  // (TransportOptions::receive_in_place), not into its bucket: LoadInto
  // leaves it.
  bool in_dst = false;
};

struct BucketSet {
  int64_t version = 0;
  std::vector<ManifestEntry> manifest;  // In the order published.
  // Contiguous kByte tensors: on the CPU, but for a receiver reading a
  // publisher's device buckets in place (cuda_ipc), which LoadInto copies
  // from and never adopts.
  std::vector<at::Tensor> buckets;
  std::vector<uint64_t> checksums;      // Checksum64 of each bucket.

  // Payload bytes: the sum of the tensors' sizes (padding excluded).
  int64_t payload_bytes() const;
};

// Tensors start at multiples of this inside a bucket, so that every dtype
// is aligned when read in place.
inline constexpr int64_t kAlignment = 64;

// A detached, contiguous CPU tensor holding `t`'s values (`t` itself when
// it already is one).
at::Tensor HostCopy(const at::Tensor& t);

// Byte buckets of `sizes`, each a free bucket of `spare` of that size where
// there is one (free: nothing but `spare` holds its memory, no set and no
// tensor that adopted it), else freshly allocated (uninitialized). Reusing
// buckets saves faulting in fresh pages for every version. Throws
// c10::Error when an allocation fails.
std::vector<at::Tensor> AllocateBuckets(const std::vector<int64_t>& sizes,
                                        const std::vector<at::Tensor>* spare);

// A receiver's buckets of its last two versions, for AllocateBuckets: the
// newest version's may be in use (adopted by the receiver's dst) while the
// next one arrives, and are free again by the one after.
class SparePool {
 public:
  const std::vector<at::Tensor>* buckets() const { return &all_; }
  // Keeps `newest` and the buckets remembered last; each is held once, so
  // that a free one has a use count of 1 (a bucket of the last version
  // reused for the newest, when the receiver copied rather than adopted
  // it, is not kept twice).
  void Remember(const std::vector<at::Tensor>& newest) {
    std::vector<at::Tensor> all = newest;
    for (size_t i = 0; i < newest_count_; ++i) {
      const at::Tensor& last = all_[i];
      if (std::none_of(newest.begin(), newest.end(),
                       [&](const at::Tensor& t) { return t.is_same(last); })) {
        all.push_back(last);
      }
    }
    all_ = std::move(all);
    newest_count_ = newest.size();
  }

 private:
  std::vector<at::Tensor> all_;  // The newest first, then the previous.
  size_t newest_count_ = 0;
};

// Plans `tensors` into buckets of at most `bucket_bytes` (a tensor larger
// than that gets a bucket of its own), in order, and allocates them
// (AllocateBuckets with `spare`); nothing is copied yet and the checksums
// are zero (PackBucket fills both). Returns InvalidArgument for an empty or
// duplicate name or an undefined tensor, ResourceExhausted when the buckets
// cannot be allocated.
[[nodiscard]] absl::StatusOr<BucketSet> PlanBuckets(const NamedTensors& tensors,
                                                    int64_t bucket_bytes,
                                                    const std::vector<at::Tensor>* spare = nullptr);

// Seconds PackBucket spent copying and checksumming.
struct PackSeconds {
  double copy = 0;
  double checksum = 0;
};

// Called as a bucket's leading bytes become final, with how many are;
// returning false stops the packing there.
using PackedThrough = std::function<bool(int64_t bytes)>;

// Copies bucket `i`'s tensors of `tensors` (the list planned) into it,
// zeroing the padding, and sets its checksum, in one pass front to back:
// each piece is checksummed right after its copy, while it is still in
// cache, and then reported to `packed` (if set). When `packed` returns
// false the bucket stays as far as it got, without its checksum. Adds the
// time to `*seconds`. Returns Internal naming the tensor if LibTorch fails
// (a device copy).
[[nodiscard]] absl::Status PackBucket(BucketSet& set, const NamedTensors& tensors, size_t i,
                                      PackSeconds* seconds, const PackedThrough& packed = nullptr);

// Whether `t`'s bytes can be read where they lie: a dense CPU tensor that is
// contiguous, or 2-D with contiguous rows (a strided view: the resharding
// sync's row pieces), neither conjugate nor negative.
bool ReadableInPlace(const at::Tensor& t);

// Calls run(pointer, bytes) for each contiguous run of bytes [begin,
// begin + n) of `t`, in row-major order: one for a contiguous tensor, a row
// (or part of one) each for a strided one. REQUIRES: ReadableInPlace(t).
void ForEachRun(const at::Tensor& t, int64_t begin, int64_t n,
                const std::function<void(const uint8_t*, int64_t)>& run);

// Copies bytes [begin, begin + n) of `t`, in row-major order, to `dst`.
// REQUIRES: ReadableInPlace(t).
void CopyBytes(const at::Tensor& t, int64_t begin, int64_t n, uint8_t* dst);

// Returns DataLoss naming the first bucket whose bytes do not match its
// checksum.
[[nodiscard]] absl::Status VerifyChecksums(const BucketSet& set);

// The same for bucket `i` alone (a transport checks each bucket as it
// arrives). REQUIRES: set.checksums has an entry per bucket.
[[nodiscard]] absl::Status VerifyBucket(const BucketSet& set, size_t i);

// The same, given the checksum `got` of bucket `i`'s bytes (computed as they
// arrived, Checksum64Stream).
[[nodiscard]] absl::Status CheckBucketChecksum(const BucketSet& set, size_t i, uint64_t got);

// Returns FailedPrecondition naming the tensor unless `dst` holds exactly
// the manifest's names (each once), each defined and with the manifest's
// dtype and shape.
[[nodiscard]] absl::Status CheckMatches(const BucketSet& set, const NamedTensors& dst);

// Copies every tensor into `dst` (any device, any strides) under
// NoGradGuard. REQUIRES: CheckMatches(set, dst) is OK, so nothing is copied
// unless everything can be. Returns Internal if LibTorch fails mid-copy, in
// which case `dst` may be partly updated.
//
// With `owned` (adoption: the set's buckets belong to the receiver alone and
// are never written again while referenced, see SparePool; `owned` lists
// the receiver's buckets of earlier versions), a contiguous CPU dst tensor
// with the manifest's dtype that owns its whole storage (shared with no
// other tensor: not a view of another one's), or sits on one of
// the `owned` buckets from an earlier adoption, takes the memory of a CPU
// bucket instead of a copy (Tensor::set_): no second pass over the bytes.
// Other dst tensors (views into the caller's memory, strided, other
// devices) are copied, as is everything from device buckets.
[[nodiscard]] absl::Status LoadInto(const BucketSet& set, const NamedTensors& dst,
                                    const std::vector<at::Tensor>* owned = nullptr);

}  // namespace trellis::weightsync::internal

#endif  // TRELLIS_WEIGHTSYNC_INTERNAL_BUCKET_SET_H_
