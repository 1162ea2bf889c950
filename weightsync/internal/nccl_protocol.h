#ifndef TRELLIS_WEIGHTSYNC_INTERNAL_NCCL_PROTOCOL_H_
#define TRELLIS_WEIGHTSYNC_INTERNAL_NCCL_PROTOCOL_H_

// What both ends of the NCCL transport agree on (nccl_transport.h): store
// keys, the encoding of requests and answers, and the graces. The
// communicators themselves are comm/nccl_pair.h.

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <string>
#include <vector>

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

inline std::vector<uint8_t> Int64s(std::initializer_list<int64_t> v) {
  std::vector<uint8_t> out(v.size() * sizeof(int64_t));
  std::memcpy(out.data(), std::data(v), out.size());
  return out;
}

inline int64_t Int64At(const std::vector<uint8_t>& b, size_t i) {
  int64_t v = 0;
  if (b.size() >= (i + 1) * sizeof(int64_t)) {
    std::memcpy(&v, b.data() + i * sizeof(int64_t), sizeof(v));
  }
  return v;
}

}  // namespace trellis::weightsync::internal::nccl

#endif  // TRELLIS_WEIGHTSYNC_INTERNAL_NCCL_PROTOCOL_H_
