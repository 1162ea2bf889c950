#ifndef TRELLIS_RPC_STATUS_H_
#define TRELLIS_RPC_STATUS_H_

// absl::Status <-> grpc::Status, in one place. Codes map one to one (the
// two enums share their numbering) and the message is kept.

#include <string_view>

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace trellis::rpc {

grpc::Status ToGrpc(const absl::Status& status);

// `what` (e.g. "actor-1 (127.0.0.1:4021) Generate") prefixes the message,
// so a caller's error names the worker and the call.
absl::Status FromGrpc(const grpc::Status& status, std::string_view what = {});

}  // namespace trellis::rpc

#endif  // TRELLIS_RPC_STATUS_H_
