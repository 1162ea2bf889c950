#ifndef TRELLIS_WEIGHTSYNC_INTERNAL_NCCL_PROTOCOL_H_
#define TRELLIS_WEIGHTSYNC_INTERNAL_NCCL_PROTOCOL_H_

// What both ends of the NCCL transport agree on (nccl_transport.h): store
// keys and the graces (requests and answers: store_protocol.h). The
// communicators themselves are cuda/nccl_pair.h.

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace trellis::weightsync::internal::nccl {

// Starts every error of the transport.
inline constexpr char kName[] = "weightsync nccl";

inline constexpr absl::Duration kAnswerGrace = absl::Milliseconds(500);
inline constexpr absl::Duration kStopGrace = absl::Seconds(3);
inline constexpr absl::Duration kPoll = absl::Milliseconds(2);

inline std::string Key(int slot, const std::string& what) {
  return absl::StrCat("nccl/slot/", slot, "/", what);
}
inline std::string Key(int slot, int64_t gen, const std::string& what) {
  return absl::StrCat("nccl/slot/", slot, "/", gen, "/", what);
}

}  // namespace trellis::weightsync::internal::nccl

#endif  // TRELLIS_WEIGHTSYNC_INTERNAL_NCCL_PROTOCOL_H_
