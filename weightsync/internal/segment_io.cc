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

namespace {

// Appends to `runs` the contiguous runs holding segment `g` of `version`.
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

}  // namespace

absl::StatusOr<std::vector<uint64_t>> StreamVersion(const StreamedVersion& version,
                                                    int64_t segment_bytes, absl::Time deadline,
                                                    const SendSegment& send) {
  const BucketSet& set = *version.set;
  PackProgress& progress = *version.progress;
  const std::vector<WireSegment> segments = Segments(set, segment_bytes);
  std::vector<uint64_t> checksums(set.buckets.size());
  std::vector<iovec> runs;
  BucketSum sum;
  size_t m = 0;
  for (size_t i = 0; i < set.buckets.size(); ++i) {
    // A bucket not packed in full yet may be sent in place: its checksum is
    // then this sender's, computed as it goes.
    const bool own = !progress.Whole(i);
    for (; m < segments.size() && segments[m].bucket == i; ++m) {
      const WireSegment& g = segments[m];
      absl::StatusOr<PackProgress::From> from =
          progress.WaitReadable(i, deadline, g.offset + g.nbytes);
      if (!from.ok()) return from.status();
      runs.clear();
      SegmentRuns(version, g, *from, runs);
      for (int64_t offset = g.offset; const iovec& run : runs) {
        if (!own) break;
        const int64_t n = static_cast<int64_t>(run.iov_len);
        if (absl::Status s = sum.Add(offset, run.iov_base, n, set.manifest[g.entry].name.c_str());
            !s.ok()) {
          return s;
        }
        offset += n;
      }
      if (absl::Status s = send(m, g, runs); !s.ok()) return s;
    }
    if (own) {
      checksums[i] = sum.Finish(set.buckets[i].numel());
    } else if (absl::Status s = progress.WaitPacked(i, deadline); !s.ok()) {
      return s;
    } else {
      checksums[i] = set.checksums[i];
    }
  }
  return checksums;
}

}  // namespace trellis::weightsync::internal
