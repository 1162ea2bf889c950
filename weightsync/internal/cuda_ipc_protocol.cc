#include "weightsync/internal/cuda_ipc_protocol.h"

#include <cstring>
#include <random>

#include "weightsync/internal/wire.h"

namespace trellis::weightsync::internal::cuda_ipc {
namespace {

// The announcement's fixed part: nonce, device, bucket count.
constexpr size_t kFixedBytes = sizeof(uint64_t) + kUuidBytes + sizeof(uint64_t);
constexpr size_t kBucketBytes = kHandleBytes + sizeof(uint64_t);

template <typename T>
void Append(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

template <typename T>
T Read(absl::string_view bytes, size_t at) {
  T v;
  std::memcpy(&v, bytes.data() + at, sizeof(v));
  return v;
}

}  // namespace

uint64_t ProcessNonce() {
  static const uint64_t nonce = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }();
  return nonce;
}

std::string EncodeAnnouncement(const Announcement& a) {
  std::string out;
  Append(out, a.process_nonce);
  out.append(a.device.data(), a.device.size());
  Append(out, static_cast<uint64_t>(a.buckets.size()));
  for (const DeviceBucket& b : a.buckets) {
    out.append(b.handle.data(), b.handle.size());
    Append(out, b.address);
  }
  out += a.header.SerializeAsString();
  return out;
}

absl::StatusOr<Announcement> DecodeAnnouncement(absl::string_view bytes) {
  const std::string where = absl::StrCat(kName, ": announcement of ", bytes.size(), " bytes");
  if (bytes.size() < kFixedBytes) {
    return absl::DataLossError(
        absl::StrCat(where, " is shorter than its fixed part (", kFixedBytes, " bytes)"));
  }
  Announcement a;
  a.process_nonce = Read<uint64_t>(bytes, 0);
  std::memcpy(a.device.data(), bytes.data() + sizeof(uint64_t), kUuidBytes);
  const uint64_t n = Read<uint64_t>(bytes, sizeof(uint64_t) + kUuidBytes);
  if (n > (bytes.size() - kFixedBytes) / kBucketBytes) {
    return absl::DataLossError(
        absl::StrCat(where, " announces ", n, " buckets, more than it has room for"));
  }
  size_t at = kFixedBytes;
  for (uint64_t i = 0; i < n; ++i, at += kBucketBytes) {
    DeviceBucket b;
    std::memcpy(b.handle.data(), bytes.data() + at, kHandleBytes);
    b.address = Read<uint64_t>(bytes, at + kHandleBytes);
    a.buckets.push_back(b);
  }
  if (!a.header.ParseFromArray(bytes.data() + at, static_cast<int>(bytes.size() - at))) {
    return absl::DataLossError(absl::StrCat(where, ": its header does not parse"));
  }
  if (static_cast<int64_t>(n) != a.header.bucket_bytes_size()) {
    return absl::DataLossError(absl::StrCat(where, " has ", n, " device buckets but its header ",
                                            a.header.bucket_bytes_size()));
  }
  return a;
}

absl::StatusOr<BucketSet> AnnouncedLayout(const Announcement& a) {
  for (size_t i = 0; i < a.buckets.size(); ++i) {
    if (a.buckets[i].address == 0) {
      return absl::DataLossError(absl::StrCat(kName, ": version ", a.header.version(), " bucket ",
                                              i, " has no device address"));
    }
  }
  return DecodeLayout(a.header);
}

std::string UuidString(const DeviceUuid& uuid) {
  std::string out;
  for (char c : uuid) absl::StrAppend(&out, absl::Hex(static_cast<uint8_t>(c), absl::kZeroPad2));
  return out;
}

}  // namespace trellis::weightsync::internal::cuda_ipc
