#include "rpc/auth.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpcpp/security/server_credentials.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"

namespace trellis::rpc {
namespace {

constexpr size_t kMinSecretChars = 32;
constexpr char kRefused[] =
    "missing or wrong credentials: this service needs the job's secret "
    "(metadata authorization: Bearer <secret>)";

absl::Mutex g_mu;
JobSecret* g_process_secret ABSL_GUARDED_BY(g_mu) = nullptr;

absl::string_view View(const grpc_slice& slice) {
  return absl::string_view(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(slice)),
                           GRPC_SLICE_LENGTH(slice));
}

// Methods open to anyone: the health service, which readiness probes
// (Kubernetes' grpc probe) call without metadata. It tells only whether
// the server serves.
bool IsOpen(absl::string_view path) { return path.rfind("/grpc.health.v1.Health/", 0) == 0; }

// The gRPC core calls Process for every call's initial metadata before
// any handler runs; a refusal ends the call with that status.
void Process(void* state, grpc_auth_context*, const grpc_metadata* md, size_t n,
             grpc_process_auth_metadata_done_cb done, void* user_data) {
  const JobSecret& secret = *static_cast<const JobSecret*>(state);
  bool open = false;
  bool authorized = false;
  for (size_t i = 0; i < n; ++i) {
    const absl::string_view key = View(md[i].key);
    if (key == ":path") open = IsOpen(View(md[i].value));
    if (key == kAuthorizationKey) authorized = secret.Accepts(View(md[i].value));
  }
  if (open || authorized) {
    done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_OK, nullptr);
  } else {
    done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_UNAUTHENTICATED, kRefused);
  }
}

// Insecure transport credentials with Process as their metadata check
// (gRPC's C++ InsecureServerCredentials takes no processor).
class SecretServerCredentials final : public grpc::ServerCredentials {
 public:
  explicit SecretServerCredentials(JobSecret secret) : secret_(std::move(secret)) {}

  void SetAuthMetadataProcessor(const std::shared_ptr<grpc::AuthMetadataProcessor>&) override {}

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    grpc_server_credentials* creds = grpc_insecure_server_credentials_create();
    grpc_auth_metadata_processor processor;
    processor.process = &Process;
    processor.state = new JobSecret(secret_);
    processor.destroy = [](void* state) { delete static_cast<JobSecret*>(state); };
    grpc_server_credentials_set_auth_metadata_processor(creds, processor);
    const int port = grpc_server_add_http2_port(server, addr.c_str(), creds);
    grpc_server_credentials_release(creds);
    return port;
  }

  const JobSecret secret_;
};

}  // namespace

absl::StatusOr<JobSecret> JobSecret::Generate() {
  unsigned char bytes[32];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::InternalError(absl::StrCat("getrandom for the job secret: ", strerror(errno)));
    }
    got += static_cast<size_t>(n);
  }
  return JobSecret(absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes))));
}

absl::StatusOr<JobSecret> JobSecret::Parse(absl::string_view text, absl::string_view where) {
  const absl::string_view secret = absl::StripAsciiWhitespace(text);
  if (secret.size() < kMinSecretChars) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": the secret has ", secret.size(),
                                                   " characters; expected at least ",
                                                   kMinSecretChars));
  }
  for (char c : secret) {
    if (absl::ascii_isspace(c) || absl::ascii_iscntrl(c) || static_cast<unsigned char>(c) > 126) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": the secret holds whitespace or a character that is not printable ASCII"));
    }
  }
  return JobSecret(std::string(secret));
}

absl::StatusOr<JobSecret> JobSecret::ReadFile(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    const int err = errno;
    const std::string why = absl::StrCat("secret file ", path, ": ", strerror(err));
    return err == ENOENT ? absl::NotFoundError(why) : absl::PermissionDeniedError(why);
  }
  if ((st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("secret file ", path, ": mode ", absl::StrFormat("%03o", st.st_mode & 0777),
                     " lets group or others read or write it; chmod 600 ", path));
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return absl::PermissionDeniedError(absl::StrCat("secret file ", path, ": unreadable"));
  return Parse(text.str(), absl::StrCat("secret file ", path));
}

bool JobSecret::Accepts(absl::string_view header) const {
  if (!secure()) return true;
  const std::string want = BearerHeader();
  if (header.size() != want.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff |= static_cast<unsigned char>(header[i]) ^ static_cast<unsigned char>(want[i]);
  }
  return diff == 0;
}

absl::Status WriteSecretFile(const std::string& path, const JobSecret& secret) {
  const std::string tmp = path + ".tmp";
  unlink(tmp.c_str());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return absl::PermissionDeniedError(absl::StrCat(tmp, ": ", strerror(errno)));
  const std::string text = secret.value() + "\n";
  const bool written =
      write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && fsync(fd) == 0;
  const int err = errno;
  close(fd);
  if (!written || rename(tmp.c_str(), path.c_str()) != 0) {
    unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat(path, ": ", strerror(written ? errno : err)));
  }
  return absl::OkStatus();
}

void SetProcessSecret(JobSecret secret) {
  absl::MutexLock lock(&g_mu);
  delete g_process_secret;
  g_process_secret = new JobSecret(std::move(secret));
}

JobSecret ProcessSecret() {
  absl::MutexLock lock(&g_mu);
  return g_process_secret == nullptr ? JobSecret::Insecure() : *g_process_secret;
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(const JobSecret& secret) {
  if (!secret.secure()) return grpc::InsecureServerCredentials();
  return std::make_shared<SecretServerCredentials>(secret);
}

}  // namespace trellis::rpc
