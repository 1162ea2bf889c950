#include "launch/secret.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace trellis::launch {
namespace {

// --secret-file, else $TRELLIS_SECRET_FILE; empty when neither.
std::string FileOf(const SecretSource& source) {
  if (!source.file.empty()) return source.file;
  const char* env = std::getenv(rpc::kSecretFileEnv);
  return env == nullptr ? "" : env;
}

}  // namespace

absl::StatusOr<rpc::JobSecret> ServeSecret(const SecretSource& source) {
  const std::string file = FileOf(source);
  if (source.insecure) {
    if (!file.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--insecure and a secret file (", file, ") both given: choose one"));
    }
    return rpc::JobSecret::Insecure();
  }
  if (file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no secret: give --secret-file FILE (or ", rpc::kSecretFileEnv,
        "), the job's secret that every one of its processes reads, or --insecure to serve "
        "anyone who can reach the port"));
  }
  return rpc::JobSecret::ReadFile(file);
}

absl::StatusOr<std::string> LaunchSecretFile(const SecretSource& source,
                                             const std::string& generated) {
  if (source.insecure || !FileOf(source).empty()) {
    absl::StatusOr<rpc::JobSecret> given = ServeSecret(source);
    if (!given.ok()) return given.status();
    return given->secure() ? FileOf(source) : "";
  }
  absl::StatusOr<rpc::JobSecret> made = rpc::JobSecret::Generate();
  if (!made.ok()) return made.status();
  if (absl::Status s = rpc::WriteSecretFile(generated, *made); !s.ok()) return s;
  return generated;
}

}  // namespace trellis::launch
