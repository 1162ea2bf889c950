#ifndef TRELLIS_LAUNCH_SECRET_H_
#define TRELLIS_LAUNCH_SECRET_H_

// The job's secret as the `trellis` commands take it (rpc/auth.h,
// docs/services.md "Security").

#include <string>

#include "absl/status/statusor.h"
#include "rpc/auth.h"

namespace trellis::launch {

// How a command is told its secret: a file, or none at all.
struct SecretSource {
  // --secret-file; empty: $TRELLIS_SECRET_FILE, when set.
  std::string file;
  // --insecure: no secret, and every caller is served.
  bool insecure = false;
};

// The secret `trellis serve` checks and sends: read from the file named.
// InvalidArgument when a file and --insecure are both given, or neither
// (secure is the default: a service is never opened by forgetting a flag).
[[nodiscard]] absl::StatusOr<rpc::JobSecret> ServeSecret(const SecretSource& source);

// The secret of a job `trellis launch` starts: the file named when there
// is one (an operator's secret), else a new one written to `generated`
// (mode 0600); insecure with --insecure. Returns the file its processes
// read, empty when insecure.
[[nodiscard]] absl::StatusOr<std::string> LaunchSecretFile(const SecretSource& source,
                                                           const std::string& generated);

}  // namespace trellis::launch

#endif  // TRELLIS_LAUNCH_SECRET_H_
