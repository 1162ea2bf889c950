#include "weightsync/internal/wire.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace trellis::weightsync::internal {

v1::WeightsHeader EncodeHeader(const BucketSet& set, bool with_checksums) {
  v1::WeightsHeader h;
  h.set_version(set.version);
  for (const ManifestEntry& e : set.manifest) {
    v1::WeightsTensorEntry* t = h.add_tensors();
    t->set_name(e.name);
    t->set_dtype(static_cast<int32_t>(e.dtype));
    for (int64_t d : e.shape) t->add_shape(d);
    t->set_bucket(e.bucket);
    t->set_offset(e.offset);
    t->set_nbytes(e.nbytes);
  }
  for (const at::Tensor& b : set.buckets) h.add_bucket_bytes(b.numel());
  for (size_t i = 0; i < set.buckets.size(); ++i) {
    h.add_checksums(with_checksums ? set.checksums[i] : 0);
  }
  return h;
}

std::vector<WireSegment> Segments(const BucketSet& set, int64_t max_bytes) {
  std::vector<WireSegment> segments;
  for (size_t k = 0; k < set.manifest.size(); ++k) {
    const ManifestEntry& e = set.manifest[k];
    for (int64_t off = 0; off < e.nbytes; off += max_bytes) {
      segments.push_back({static_cast<size_t>(e.bucket), k, e.offset + off,
                          std::min(max_bytes, e.nbytes - off)});
    }
  }
  std::stable_sort(segments.begin(), segments.end(), [](const auto& a, const auto& b) {
    return a.bucket != b.bucket ? a.bucket < b.bucket : a.offset < b.offset;
  });
  return segments;
}

absl::StatusOr<BucketSet> DecodeLayout(const v1::WeightsHeader& header, int64_t max_total_bytes) {
  const std::string where = absl::StrCat("weightsync: header of version ", header.version());
  if (header.checksums_size() != header.bucket_bytes_size()) {
    return absl::DataLossError(absl::StrCat(where, " lists ", header.bucket_bytes_size(),
                                            " buckets but ", header.checksums_size(),
                                            " checksums"));
  }
  int64_t total = 0;
  for (int64_t n : header.bucket_bytes()) {
    if (n < 0 || n > max_total_bytes - total) {
      return absl::DataLossError(
          absl::StrCat(where, " announces more than ", max_total_bytes, " bytes"));
    }
    total += n;
  }
  BucketSet set;
  set.version = header.version();
  for (const v1::WeightsTensorEntry& t : header.tensors()) {
    ManifestEntry e;
    e.name = t.name();
    if (t.dtype() < 0 || t.dtype() >= static_cast<int32_t>(at::ScalarType::NumOptions)) {
      return absl::DataLossError(
          absl::StrCat(where, ": tensor '", t.name(), "' has unknown dtype ", t.dtype()));
    }
    e.dtype = static_cast<at::ScalarType>(t.dtype());
    e.shape.assign(t.shape().begin(), t.shape().end());
    e.bucket = t.bucket();
    e.offset = t.offset();
    e.nbytes = t.nbytes();
    if (e.nbytes < 0 || e.offset < 0 ||
        (e.nbytes > 0 && (e.bucket < 0 || e.bucket >= header.bucket_bytes_size() ||
                          e.offset > header.bucket_bytes(e.bucket) - e.nbytes))) {
      return absl::DataLossError(absl::StrCat(where, ": tensor '", t.name(), "' (", e.nbytes,
                                              " bytes at ", e.offset, " of bucket ", e.bucket,
                                              ") lies outside its bucket"));
    }
    int64_t numel = 1;
    bool negative = false;
    for (int64_t d : e.shape) {
      negative |= d < 0;
      numel *= d;
    }
    if (negative || numel * static_cast<int64_t>(c10::elementSize(e.dtype)) != e.nbytes) {
      return absl::DataLossError(absl::StrCat(where, ": tensor '", t.name(), "' has ", e.nbytes,
                                              " bytes, which does not match its shape and dtype"));
    }
    set.manifest.push_back(std::move(e));
  }
  set.checksums.assign(header.checksums().begin(), header.checksums().end());
  return set;
}

absl::StatusOr<BucketSet> DecodeHeader(const v1::WeightsHeader& header,
                                       const std::vector<at::Tensor>* spare,
                                       int64_t max_total_bytes) {
  absl::StatusOr<BucketSet> set = DecodeLayout(header, max_total_bytes);
  if (!set.ok()) return set;
  try {
    set->buckets = AllocateBuckets(
        std::vector<int64_t>(header.bucket_bytes().begin(), header.bucket_bytes().end()), spare);
  } catch (const c10::Error& err) {
    return absl::ResourceExhaustedError(
        absl::StrCat("weightsync: header of version ", header.version(),
                     ": allocating buckets: ", err.what_without_backtrace()));
  }
  return set;
}

}  // namespace trellis::weightsync::internal
