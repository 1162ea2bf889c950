#ifndef TRELLIS_WEIGHTSYNC_INTERNAL_STORE_PROTOCOL_H_
#define TRELLIS_WEIGHTSYNC_INTERNAL_STORE_PROTOCOL_H_

// What the transports whose receivers ask and are answered through the
// publisher's rendezvous store (nccl, cuda_ipc) encode the same way: int64 fields
// of requests, and answers that carry either a body or the publisher's
// error.

#include <cstdint>
#include <exception>
#include <initializer_list>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace trellis::weightsync::internal {

// `v` as native-endian int64s (both ends run on one machine or one build).
std::vector<uint8_t> Int64s(std::initializer_list<int64_t> v);

// The `i`th int64 of `b`, or 0 when `b` is too short.
int64_t Int64At(const std::vector<uint8_t>& b, size_t i);

// The answer to one request: `body` when `status` is OK, else the error's
// code and message. Cancelled (the publisher closing) is sent as
// Unavailable: to the receiver the publisher is gone.
std::vector<uint8_t> EncodeAnswer(const absl::Status& status, const std::string& body);

// The body of an answer, or the publisher's error it carries.
[[nodiscard]] absl::StatusOr<std::string> DecodeAnswer(const std::vector<uint8_t>& answer);

// What a store operation's exception means to a receiver: DeadlineExceeded
// ("no answer in time") for c10d's timeouts, else Unavailable.
absl::Status StoreError(const std::exception& e);

// A receiver's request for a version >= `min_version` by `deadline`: sets
// `req_key` to (min_version, the milliseconds left), then waits until the
// deadline plus `grace` for `ans_key`, takes it (deleting the key) and
// returns its body (DecodeAnswer). Sets *answered once the answer arrived,
// so that an error it carries is told from a link failure (StoreError).
[[nodiscard]] absl::StatusOr<std::string> AskForVersion(c10d::Store& store,
                                                        const std::string& req_key,
                                                        const std::string& ans_key,
                                                        int64_t min_version, absl::Time deadline,
                                                        absl::Duration grace, bool* answered);

}  // namespace trellis::weightsync::internal

#endif  // TRELLIS_WEIGHTSYNC_INTERNAL_STORE_PROTOCOL_H_
