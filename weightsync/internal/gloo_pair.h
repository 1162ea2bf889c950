#ifndef TRELLIS_WEIGHTSYNC_INTERNAL_GLOO_PAIR_H_
#define TRELLIS_WEIGHTSYNC_INTERNAL_GLOO_PAIR_H_

// What both ends of the gloo transport share (weightsync/gloo_transport.h):
// the message tags, the slice size, and setting up and waiting on the
// two-rank process group of one receiver slot.

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "weightsync/gloo_transport.h"

namespace trellis::weightsync::internal::gloo {

using PG = c10d::ProcessGroupGloo;

inline constexpr int kTagRequest = 1;
inline constexpr int kTagPreamble = 2;
inline constexpr int kTagBody = 3;
inline constexpr int kTagBucket0 = 16;
inline constexpr int64_t kMaxHeaderBytes = int64_t{1} << 30;
// Buckets travel in messages of at most this many bytes, so that the
// receiver checksums one slice while the next ones arrive whatever the
// bucket size.
inline constexpr int64_t kSliceBytes = int64_t{8} << 20;
// How long past its timeout a receiver waits for the sender's answer.
inline constexpr absl::Duration kAnswerGrace = absl::Milliseconds(500);
// How long the sender's destructor waits for its threads before leaving
// them to finish on their own.
inline constexpr absl::Duration kStopGrace = absl::Seconds(3);

// The store key holding the pair generation of receiver slot `slot`.
std::string GenerationKey(int slot);

bool IsLoopback(const std::string& host);

// Waits for one send or recv. A gloo timeout poisons the whole pair, so
// every error here means: drop the process group.
[[nodiscard]] absl::Status WaitWork(const c10::intrusive_ptr<c10d::Work>& work,
                                    absl::Duration timeout, const char* what);

// The two-rank process group of receiver slot `slot`, generation
// `generation` (rank 0: the sender).
[[nodiscard]] absl::StatusOr<c10::intrusive_ptr<PG>> ConnectPair(
    const c10::intrusive_ptr<c10d::Store>& store,
    const std::shared_ptr<::gloo::transport::Device>& device, int slot,
    int64_t generation, int rank, absl::Duration timeout);

// InvalidArgument naming the field of an unusable endpoint.
[[nodiscard]] absl::Status CheckEndpoint(const GlooEndpoint& ep);

}  // namespace trellis::weightsync::internal::gloo

#endif  // TRELLIS_WEIGHTSYNC_INTERNAL_GLOO_PAIR_H_
