#ifndef TRELLIS_RPC_AUTH_H_
#define TRELLIS_RPC_AUTH_H_

// Who may call a job's services: the job's shared secret. Every server of a
// secured job refuses a call without `authorization: Bearer <secret>` with
// UNAUTHENTICATED (the health service excepted, for readiness probes), and
// every channel sends it (docs/services.md, "Security"). The secret says
// who may call; it does not encrypt the wire.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace grpc {
class ServerCredentials;
}

namespace trellis::rpc {

// The environment variable naming a secret file (trellis serve, the Python
// verifier SDK, tests/python/check_services.py read it).
inline constexpr char kSecretFileEnv[] = "TRELLIS_SECRET_FILE";
// The metadata key the secret travels in, as "Bearer <secret>".
inline constexpr char kAuthorizationKey[] = "authorization";

class JobSecret {
 public:
  // No secret: servers accept every call, channels send nothing. For
  // `--insecure` local experiments and in-process tests.
  static JobSecret Insecure() { return JobSecret(""); }
  // 32 random bytes from the kernel, as 64 hex digits.
  [[nodiscard]] static absl::StatusOr<JobSecret> Generate();
  // `text` without surrounding whitespace: at least 32 characters, none
  // of them whitespace or control characters. InvalidArgument naming
  // `where` (never quoting the text) otherwise.
  [[nodiscard]] static absl::StatusOr<JobSecret> Parse(absl::string_view text,
                                                       absl::string_view where);
  // A secret file: NotFound when it is missing; PermissionDenied when group
  // or others may read or write it (chmod 600); Parse's errors.
  [[nodiscard]] static absl::StatusOr<JobSecret> ReadFile(const std::string& path);

  bool secure() const { return !value_.empty(); }
  const std::string& value() const { return value_; }
  // "Bearer <secret>".
  std::string BearerHeader() const { return "Bearer " + value_; }
  // Whether `header` is BearerHeader(), compared in constant time. Always
  // true when insecure.
  bool Accepts(absl::string_view header) const;

 private:
  explicit JobSecret(std::string value) : value_(std::move(value)) {}
  std::string value_;
};

// Writes `secret` to `path` (mode 0600, replaced whole through a rename).
[[nodiscard]] absl::Status WriteSecretFile(const std::string& path, const JobSecret& secret);

// The secret this process's servers check and its channels send unless
// told otherwise (ServerOptions::secret, NewChannel's second argument).
// Insecure until set; `trellis` sets it once at start-up.
void SetProcessSecret(JobSecret secret);
JobSecret ProcessSecret();

// Server credentials that refuse, with UNAUTHENTICATED, every call to a
// method outside grpc.health.v1.Health that lacks `secret`; insecure
// credentials for an insecure secret.
std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(const JobSecret& secret);

}  // namespace trellis::rpc

#endif  // TRELLIS_RPC_AUTH_H_
