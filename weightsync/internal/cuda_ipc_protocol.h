#ifndef TRELLIS_WEIGHTSYNC_INTERNAL_CUDA_IPC_PROTOCOL_H_
#define TRELLIS_WEIGHTSYNC_INTERNAL_CUDA_IPC_PROTOCOL_H_

// What both ends of the CUDA IPC transport agree on (cuda_ipc_transport.h):
// store keys, the graces, and the announcement of one version: where its
// device buckets are (an IPC memory handle each) and how they are laid out.
// Compiled without CUDA, so that the encoding is tested everywhere.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "trellis/v1/weights.pb.h"
#include "weightsync/internal/bucket_set.h"

namespace trellis::weightsync::internal::cuda_ipc {

// Starts every error of the transport.
inline constexpr char kName[] = "weightsync cuda_ipc";

inline constexpr absl::Duration kAnswerGrace = absl::Milliseconds(500);
inline constexpr absl::Duration kStopGrace = absl::Seconds(3);
inline constexpr absl::Duration kPoll = absl::Milliseconds(1);

// Store keys of receiver slot `slot`: "generation" (bumped by a receiver
// as it (re)connects), and per generation "req/<n>" (min_version, wait_ms),
// "ans/<n>" (store_protocol.h's answer: an encoded Announcement) and
// "done/<n>" (the receiver has finished reading the answered buckets).
inline std::string Key(int slot, const std::string& what) {
  return absl::StrCat("cuda_ipc/slot/", slot, "/", what);
}
inline std::string Key(int slot, int64_t gen, const std::string& what) {
  return absl::StrCat("cuda_ipc/slot/", slot, "/", gen, "/", what);
}

// The bytes of a cudaIpcMemHandle_t and of a device's cudaUUID_t.
inline constexpr size_t kHandleBytes = 64;
inline constexpr size_t kUuidBytes = 16;
using IpcHandle = std::array<char, kHandleBytes>;
using DeviceUuid = std::array<char, kUuidBytes>;

// One device bucket: its IPC handle, and its address in the publisher's
// process (used instead of the handle by a receiver in that same process,
// where CUDA refuses to open the process's own handles).
struct DeviceBucket {
  IpcHandle handle{};
  uint64_t address = 0;
};

// A version as the publisher announces it.
struct Announcement {
  // Random per publishing process (ProcessNonce): equal to the receiver's
  // own when both ends share a process.
  uint64_t process_nonce = 0;
  // The publisher's GPU; a receiver reads the buckets only on the same one.
  DeviceUuid device{};
  std::vector<DeviceBucket> buckets;  // One per header.bucket_bytes.
  v1::WeightsHeader header;
};

// A random number drawn once per process.
uint64_t ProcessNonce();

std::string EncodeAnnouncement(const Announcement& a);

// Returns DataLoss naming what is wrong when `bytes` is not an announcement
// (too short, a bucket count unlike the header's, a header that does not
// parse).
[[nodiscard]] absl::StatusOr<Announcement> DecodeAnnouncement(absl::string_view bytes);

// The announced layout (DecodeLayout) with no buckets yet, after checking
// that every bucket has an address: DataLoss naming the first bucket without
// one (a publisher always has device memory behind a bucket, empty or not).
[[nodiscard]] absl::StatusOr<BucketSet> AnnouncedLayout(const Announcement& a);

// The hexadecimal form of a device UUID, for messages.
std::string UuidString(const DeviceUuid& uuid);

}  // namespace trellis::weightsync::internal::cuda_ipc

#endif  // TRELLIS_WEIGHTSYNC_INTERNAL_CUDA_IPC_PROTOCOL_H_
