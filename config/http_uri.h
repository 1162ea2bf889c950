#ifndef TRELLIS_CONFIG_HTTP_URI_H_
#define TRELLIS_CONFIG_HTTP_URI_H_

// The address of an HTTP service a job names (observe.mlflow.uri):
// http://host:port or https://host:port, nothing after the port but an
// optional "/".

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trellis::config {

struct HttpUri {
  std::string scheme;  // "http" or "https"
  std::string host;
  int port = 0;
  // scheme://host:port
  std::string ToString() const;
};

// InvalidArgument saying what was expected, quoting `uri`.
[[nodiscard]] absl::StatusOr<HttpUri> ParseHttpUri(absl::string_view uri);

}  // namespace trellis::config

#endif  // TRELLIS_CONFIG_HTTP_URI_H_
