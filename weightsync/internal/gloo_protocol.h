#ifndef TRELLIS_WEIGHTSYNC_INTERNAL_GLOO_PROTOCOL_H_
#define TRELLIS_WEIGHTSYNC_INTERNAL_GLOO_PROTOCOL_H_

// What both ends of the gloo transport agree on (gloo_transport.h): store
// keys, message tags, the slice size and the graces. The process groups
// themselves are comm/gloo_pair.h.

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace trellis::weightsync::internal::gloo {

// Starts every error of the transport.
inline constexpr char kName[] = "weightsync gloo";

inline constexpr int kTagRequest = 1;
inline constexpr int kTagPreamble = 2;
inline constexpr int kTagBody = 3;
// The buckets' checksums (int64 each), after the last bucket.
inline constexpr int kTagChecksums = 4;
inline constexpr int kTagBucket0 = 16;
inline constexpr int64_t kMaxHeaderBytes = int64_t{1} << 30;
// Buckets travel in messages of at most this many bytes, so that the
// receiver checksums one slice while the next ones arrive whatever the
// bucket size, each while it is still in cache.
inline constexpr int64_t kSliceBytes = int64_t{1} << 20;
// The messages a sender keeps in flight: the bytes it reads (and checksums
// when sending them in place) are sent while still in cache.
inline constexpr size_t kSendWindow = 4;
// How long past its timeout a receiver waits for the publisher's answer.
inline constexpr absl::Duration kAnswerGrace = absl::Milliseconds(500);
// How long the publisher's destructor waits for its threads before leaving
// them to finish on their own.
inline constexpr absl::Duration kStopGrace = absl::Seconds(3);

// The store key holding the pair generation of receiver slot `slot`.
inline std::string GenerationKey(int slot) { return absl::StrCat("slot/", slot, "/generation"); }

// The store prefix of the two-rank group (rank 0: the publisher) of slot
// `slot`, generation `generation`.
inline std::string PairPrefix(int slot, int64_t generation) {
  return absl::StrCat("pair/", slot, "/", generation);
}

}  // namespace trellis::weightsync::internal::gloo

#endif  // TRELLIS_WEIGHTSYNC_INTERNAL_GLOO_PROTOCOL_H_
