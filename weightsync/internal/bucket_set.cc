#include "weightsync/internal/bucket_set.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "weightsync/internal/checksum.h"

namespace trellis::weightsync::internal {
namespace {

int64_t AlignUp(int64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

std::string ShapeString(c10::IntArrayRef shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

at::Tensor HostCopy(const at::Tensor& t) {
  at::Tensor src = t.detach();
  if (!src.device().is_cpu()) src = src.to(at::kCPU);
  return src.resolve_conj().resolve_neg().contiguous();
}

int64_t BucketSet::payload_bytes() const {
  int64_t sum = 0;
  for (const ManifestEntry& e : manifest) sum += e.nbytes;
  return sum;
}

std::vector<at::Tensor> AllocateBuckets(const std::vector<int64_t>& sizes,
                                        const std::vector<at::Tensor>* spare) {
  std::vector<at::Tensor> buckets;
  std::vector<bool> taken(spare != nullptr ? spare->size() : 0, false);
  for (const int64_t n : sizes) {
    at::Tensor bucket;
    for (size_t j = 0; j < taken.size() && !bucket.defined(); ++j) {
      const at::Tensor& candidate = (*spare)[j];
      // Only `spare` holds the tensor, and only the tensor its memory.
      if (!taken[j] && candidate.defined() && candidate.numel() == n &&
          candidate.use_count() == 1 && candidate.storage().use_count() == 1) {
        taken[j] = true;
        bucket = candidate;
      }
    }
    buckets.push_back(bucket.defined() ? bucket : at::empty({n}, at::dtype(at::kByte)));
  }
  return buckets;
}

absl::StatusOr<BucketSet> PlanBuckets(const NamedTensors& tensors, int64_t bucket_bytes,
                                      const std::vector<at::Tensor>* spare) {
  BucketSet set;
  std::unordered_set<std::string> names;
  std::vector<int64_t> bucket_sizes;
  for (const auto& [name, t] : tensors) {
    if (name.empty()) {
      return absl::InvalidArgumentError("weightsync: a tensor has no name");
    }
    if (!names.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("weightsync: tensor '", name, "' is given twice"));
    }
    if (!t.defined()) {
      return absl::InvalidArgumentError(
          absl::StrCat("weightsync: tensor '", name, "' is undefined"));
    }
    ManifestEntry e;
    e.name = name;
    e.dtype = t.scalar_type();
    e.shape = t.sizes().vec();
    e.nbytes = static_cast<int64_t>(t.numel() * t.element_size());
    const int64_t offset = bucket_sizes.empty() ? 0 : AlignUp(bucket_sizes.back());
    if (bucket_sizes.empty() || (bucket_sizes.back() > 0 && offset + e.nbytes > bucket_bytes)) {
      bucket_sizes.push_back(0);
      e.offset = 0;
    } else {
      e.offset = offset;
    }
    e.bucket = static_cast<int>(bucket_sizes.size()) - 1;
    bucket_sizes.back() = e.offset + e.nbytes;
    set.manifest.push_back(std::move(e));
  }
  try {
    set.buckets = AllocateBuckets(bucket_sizes, spare);
  } catch (const c10::Error& err) {
    return absl::ResourceExhaustedError(absl::StrCat("weightsync: allocating buckets for ",
                                                     tensors.size(),
                                                     " tensors: ", err.what_without_backtrace()));
  }
  set.checksums.assign(set.buckets.size(), 0);
  return set;
}

namespace {

// Pieces small enough to be checksummed from cache right after their copy.
constexpr int64_t kPackPiece = int64_t{256} << 10;

// Fills one bucket front to back, checksumming as it goes, until `packed`
// says stop.
struct BucketWriter {
  uint8_t* base;
  const PackedThrough& packed;
  PackSeconds& seconds;
  Checksum64Stream sum{};
  int64_t cursor = 0;
  bool stopped = false;

  // Writes bytes [cursor, end) (of `src` from its byte `cursor - start`, or
  // zeros when `src` is null), a piece at a time.
  void FillTo(int64_t end, const at::Tensor* src) {
    for (const int64_t start = cursor; cursor < end && !stopped;) {
      const int64_t k = std::min(kPackPiece, end - cursor);
      uint8_t* const dst = base + cursor;
      const auto t0 = std::chrono::steady_clock::now();
      if (src != nullptr) {
        CopyBytes(*src, cursor - start, k, dst);
      } else {
        std::memset(dst, 0, static_cast<size_t>(k));
      }
      const auto t1 = std::chrono::steady_clock::now();
      sum.Update(dst, static_cast<size_t>(k));
      const auto t2 = std::chrono::steady_clock::now();
      seconds.copy += std::chrono::duration<double>(t1 - t0).count();
      seconds.checksum += std::chrono::duration<double>(t2 - t1).count();
      cursor += k;
      stopped = packed && !packed(cursor);
    }
  }
};

}  // namespace

bool ReadableInPlace(const at::Tensor& t) {
  return t.device().is_cpu() && t.layout() == at::kStrided && !t.is_conj() && !t.is_neg() &&
         (t.is_contiguous() || (t.dim() == 2 && t.stride(1) == 1));
}

void ForEachRun(const at::Tensor& t, int64_t begin, int64_t n,
                const std::function<void(const uint8_t*, int64_t)>& run) {
  const auto* base = static_cast<const uint8_t*>(t.data_ptr());
  if (t.is_contiguous()) {
    run(base + begin, n);
    return;
  }
  // Row by row: rows of `row` bytes, `stride` bytes apart.
  const int64_t row = t.size(1) * t.element_size();
  const int64_t stride = t.stride(0) * t.element_size();
  while (n > 0) {
    const int64_t in_row = begin % row;
    const int64_t k = std::min(n, row - in_row);
    run(base + begin / row * stride + in_row, k);
    begin += k;
    n -= k;
  }
}

void CopyBytes(const at::Tensor& t, int64_t begin, int64_t n, uint8_t* dst) {
  ForEachRun(t, begin, n, [&dst](const uint8_t* p, int64_t k) {
    std::memcpy(dst, p, static_cast<size_t>(k));
    dst += k;
  });
}

absl::Status PackBucket(BucketSet& set, const NamedTensors& tensors, size_t i, PackSeconds* seconds,
                        const PackedThrough& packed) {
  at::Tensor& bucket = set.buckets[i];
  BucketWriter writer{bucket.data_ptr<uint8_t>(), packed, *seconds};
  for (size_t k = 0; k < set.manifest.size() && !writer.stopped; ++k) {
    const ManifestEntry& e = set.manifest[k];
    if (e.bucket != static_cast<int>(i) || e.nbytes == 0) continue;
    const at::Tensor& t = tensors[k].second;
    // Rows contiguous but apart are packed row by row, with no contiguous
    // copy first.
    at::Tensor src;
    try {
      src = ReadableInPlace(t) ? t : HostCopy(t);
    } catch (const c10::Error& err) {
      return absl::InternalError(absl::StrCat("weightsync: packing tensor '", e.name,
                                              "': ", err.what_without_backtrace()));
    }
    writer.FillTo(e.offset, nullptr);  // The padding before it.
    writer.FillTo(e.offset + e.nbytes, &src);
  }
  writer.FillTo(bucket.numel(), nullptr);
  if (!writer.stopped) set.checksums[i] = writer.sum.Finish();
  return absl::OkStatus();
}

absl::Status VerifyChecksums(const BucketSet& set) {
  if (set.checksums.size() != set.buckets.size()) {
    return absl::DataLossError(absl::StrCat("weightsync: version ", set.version, " has ",
                                            set.buckets.size(), " buckets but ",
                                            set.checksums.size(), " checksums"));
  }
  for (size_t i = 0; i < set.buckets.size(); ++i) {
    if (absl::Status s = VerifyBucket(set, i); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status VerifyBucket(const BucketSet& set, size_t i) {
  const at::Tensor& b = set.buckets[i];
  return CheckBucketChecksum(set, i, Checksum64(b.data_ptr(), b.numel()));
}

absl::Status CheckBucketChecksum(const BucketSet& set, size_t i, uint64_t got) {
  const at::Tensor& b = set.buckets[i];
  if (got != set.checksums[i]) {
    return absl::DataLossError(absl::StrCat("weightsync: version ", set.version, " bucket ", i,
                                            " of ", set.buckets.size(), " (", b.numel(),
                                            " bytes) failed its checksum: expected ",
                                            absl::Hex(set.checksums[i]), ", got ", absl::Hex(got)));
  }
  return absl::OkStatus();
}

absl::Status CheckMatches(const BucketSet& set, const NamedTensors& dst) {
  std::unordered_map<std::string, const ManifestEntry*> by_name;
  for (const ManifestEntry& e : set.manifest) by_name[e.name] = &e;
  std::unordered_set<std::string> seen;
  const std::string where = absl::StrCat("weightsync: version ", set.version);
  for (const auto& [name, t] : dst) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat(where, " has no tensor '", name, "' that the receiver expects"));
    }
    if (!seen.insert(name).second) {
      return absl::FailedPreconditionError(
          absl::StrCat(where, ": the receiver lists tensor '", name, "' twice"));
    }
    const ManifestEntry& e = *it->second;
    if (!t.defined()) {
      return absl::FailedPreconditionError(
          absl::StrCat(where, ": the receiver's tensor '", name, "' is undefined"));
    }
    if (t.scalar_type() != e.dtype) {
      return absl::FailedPreconditionError(
          absl::StrCat(where, ": tensor '", name, "' was published as ", c10::toString(e.dtype),
                       " but the receiver has ", c10::toString(t.scalar_type())));
    }
    if (t.sizes() != c10::IntArrayRef(e.shape)) {
      return absl::FailedPreconditionError(
          absl::StrCat(where, ": tensor '", name, "' was published with shape ",
                       ShapeString(e.shape), " but the receiver has ", ShapeString(t.sizes())));
    }
  }
  for (const ManifestEntry& e : set.manifest) {
    if (seen.count(e.name) == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(where, " carries tensor '", e.name, "' that the receiver does not have"));
    }
  }
  return absl::OkStatus();
}

namespace {

// Whether `target` may take bucket memory: see LoadInto.
bool Adoptable(const at::Tensor& target, const at::Tensor& bucket, const ManifestEntry& e,
               const std::vector<at::Tensor>& owned) {
  if (!target.device().is_cpu() || !bucket.device().is_cpu() || !target.is_contiguous() ||
      target.scalar_type() != e.dtype ||
      e.offset % static_cast<int64_t>(c10::elementSize(e.dtype)) != 0) {
    return false;
  }
  // Its own storage, which no other tensor shares: a view spanning all of
  // another tensor's storage is copied into, or that tensor would not see it.
  if (target.storage_offset() == 0 && static_cast<int64_t>(target.storage().nbytes()) == e.nbytes &&
      target.storage().use_count() == 1) {
    return true;
  }
  for (const at::Tensor& bucket : owned) {
    if (bucket.defined() && target.storage().is_alias_of(bucket.storage())) return true;
  }
  return false;
}

}  // namespace

absl::Status LoadInto(const BucketSet& set, const NamedTensors& dst,
                      const std::vector<at::Tensor>* owned) {
  std::unordered_map<std::string, const ManifestEntry*> by_name;
  for (const ManifestEntry& e : set.manifest) by_name[e.name] = &e;
  c10::NoGradGuard no_grad;
  for (const auto& [name, t] : dst) {
    const ManifestEntry& e = *by_name.at(name);
    if (e.nbytes == 0 || e.in_dst) continue;
    try {
      at::Tensor target = t;
      const at::Tensor& bucket = set.buckets[e.bucket];
      if (owned != nullptr && Adoptable(target, bucket, e, *owned)) {
        const int64_t element = static_cast<int64_t>(c10::elementSize(e.dtype));
        target.set_(bucket.storage(), e.offset / element, e.shape);
        continue;
      }
      uint8_t* base = bucket.data_ptr<uint8_t>() + e.offset;
      const at::Tensor src =
          at::from_blob(base, e.shape, at::TensorOptions().dtype(e.dtype).device(bucket.device()));
      // copy_ on a const Tensor& writes through to the shared storage.
      target.copy_(src);
    } catch (const c10::Error& err) {
      return absl::InternalError(
          absl::StrCat("weightsync: loading tensor '", name, "' of version ", set.version,
                       " (the receiver may be partly updated): ", err.what_without_backtrace()));
    }
  }
  return absl::OkStatus();
}

}  // namespace trellis::weightsync::internal
