#include "rpc/status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace trellis::rpc {

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Status FromGrpc(const grpc::Status& status, std::string_view what) {
  if (status.ok()) return absl::OkStatus();
  const auto code = static_cast<absl::StatusCode>(status.error_code());
  if (what.empty()) return absl::Status(code, status.error_message());
  return absl::Status(code, absl::StrCat(std::string(what), ": ", status.error_message()));
}

}  // namespace trellis::rpc
