#include "weightsync/internal/segment_io.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "weightsync/internal/bucket_set.h"

namespace trellis::weightsync::internal {

void BucketSum::Zeros(int64_t n) {
  static constexpr uint8_t kZeros[kAlignment] = {};
  for (; n > 0; n -= kAlignment) sum_.Update(kZeros, static_cast<size_t>(std::min(n, kAlignment)));
}

absl::Status BucketSum::Add(int64_t offset, const void* data, int64_t n, const char* what) {
  if (offset < cursor_) {
    return absl::DataLossError(
        absl::StrCat("the header's tensor '", what, "' overlaps another in its bucket"));
  }
  Zeros(offset - cursor_);
  sum_.Update(data, static_cast<size_t>(n));
  cursor_ = offset + n;
  return absl::OkStatus();
}

uint64_t BucketSum::Finish(int64_t size) {
  Zeros(size - cursor_);
  const uint64_t got = sum_.Finish();
  sum_.Reset();
  cursor_ = 0;
  return got;
}

void ReceivedSums::Settle(size_t upto) {
  for (; bucket_ < upto; ++bucket_) got_[bucket_] = sum_.Finish(set_.buckets[bucket_].numel());
}

absl::Status ReceivedSums::Add(const WireSegment& g, const void* data) {
  Settle(g.bucket);
  if (data == nullptr) data = set_.buckets[g.bucket].data_ptr<uint8_t>() + g.offset;
  return sum_.Add(g.offset, data, g.nbytes, set_.manifest[g.entry].name.c_str());
}

absl::Status ReceivedSums::Verify() {
  Settle(set_.buckets.size());
  for (size_t i = 0; i < got_.size(); ++i) {
    if (absl::Status s = CheckBucketChecksum(set_, i, got_[i]); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void SegmentRuns(const StreamedVersion& version, const WireSegment& g, PackProgress::From from,
                 std::vector<iovec>& runs) {
  auto add = [&runs](const uint8_t* p, int64_t n) {
    runs.push_back(iovec{const_cast<uint8_t*>(p), static_cast<size_t>(n)});
  };
  if (from == PackProgress::From::kBucket) {
    add(version.set->buckets[g.bucket].data_ptr<uint8_t>() + g.offset, g.nbytes);
    return;
  }
  const at::Tensor& t = (*version.tensors)[g.entry].second;
  ForEachRun(t, g.offset - version.set->manifest[g.entry].offset, g.nbytes, add);
}

}  // namespace trellis::weightsync::internal
