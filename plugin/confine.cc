#include "plugin/confine.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <sched.h>
#include <seccomp.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <memory>

#include "absl/strings/str_cat.h"

namespace trellis::plugin {
namespace {

// Landlock's truncate right (ABI 3) and scopes (ABI 6) postdate Debian 12's
// kernel headers: the ruleset attribute as the newer kernels read it.
constexpr uint64_t kLandlockTruncate = uint64_t{1} << 14;
constexpr uint64_t kScopeAbstractUnixSocket = 1;
constexpr uint64_t kScopeSignal = 2;
struct RulesetAttr {
  uint64_t handled_access_fs = 0;
  uint64_t handled_access_net = 0;
  uint64_t scoped = 0;
};

constexpr const char* kDenied[] = {"ptrace",
                                   "process_vm_readv",
                                   "process_vm_writev",
                                   "mount",
                                   "umount2",
                                   "pivot_root",
                                   "chroot",
                                   "kexec_load",
                                   "kexec_file_load",
                                   "bpf",
                                   "keyctl",
                                   "add_key",
                                   "request_key",
                                   "unshare",
                                   "setns",
                                   "perf_event_open",
                                   "userfaultfd",
                                   "io_uring_setup",
                                   "io_uring_enter",
                                   "io_uring_register",
                                   "init_module",
                                   "finit_module",
                                   "delete_module",
                                   "reboot",
                                   "swapon",
                                   "swapoff",
                                   "settimeofday",
                                   "clock_settime",
                                   "clock_adjtime",
                                   "adjtimex",
                                   "acct",
                                   "quotactl",
                                   "open_by_handle_at",
                                   "name_to_handle_at",
                                   "fsopen",
                                   "fsmount",
                                   "move_mount",
                                   "open_tree",
                                   "setsid",
                                   "setpgid"};

constexpr uint64_t kNamespaceFlags[] = {CLONE_NEWUSER, CLONE_NEWNS,  CLONE_NEWPID,   CLONE_NEWNET,
                                        CLONE_NEWIPC,  CLONE_NEWUTS, CLONE_NEWCGROUP};

struct CtxDeleter {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};

absl::Status Check(int rc, const std::string& what) {
  if (rc == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("seccomp filter: ", what, ": ", strerror(-rc)));
}

absl::StatusOr<std::vector<sock_filter>> Compile() {
  std::unique_ptr<void, CtxDeleter> ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (ctx == nullptr) return absl::InternalError("seccomp filter: seccomp_init failed");
  for (const char* name : kDenied) {
    const int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue;  // not on this architecture
    absl::Status s = Check(seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), nr, 0), name);
    if (!s.ok()) return s;
  }
  for (uint64_t flag : kNamespaceFlags) {
    absl::Status s = Check(seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                                            SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag)),
                           "clone");
    if (!s.ok()) return s;
  }
  absl::Status s =
      Check(seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0), "clone3");
  if (s.ok()) {
    s = Check(seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
                               SCMP_A0(SCMP_CMP_NE, AF_UNIX)),
              "socket");
  }
  if (!s.ok()) return s;
  const int fd = memfd_create("trellis-seccomp-export", MFD_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("seccomp filter: memfd: ", strerror(errno)));
  s = Check(seccomp_export_bpf(ctx.get(), fd), "export");
  struct stat st {};
  if (s.ok() && (fstat(fd, &st) != 0 || st.st_size % sizeof(sock_filter) != 0)) {
    s = absl::InternalError("seccomp filter: exported program has an odd size");
  }
  std::vector<sock_filter> program(s.ok() ? st.st_size / sizeof(sock_filter) : 0);
  const size_t bytes = program.size() * sizeof(sock_filter);
  if (s.ok() && pread(fd, program.data(), bytes, 0) != static_cast<ssize_t>(bytes)) {
    s = absl::InternalError("seccomp filter: cannot read the exported program back");
  }
  close(fd);
  if (!s.ok()) return s;
  return program;
}

uint64_t HandledAccess(int abi) {
  uint64_t handled = (LANDLOCK_ACCESS_FS_MAKE_SYM << 1) - 1;  // ABI 1
  if (abi >= 2) handled |= LANDLOCK_ACCESS_FS_REFER;
  if (abi >= 3) handled |= kLandlockTruncate;
  return handled;
}

// Adds `access` (file rights only, when the path is not a directory) under `path`.
absl::Status AddRule(int ruleset, const std::string& path, uint64_t access) {
  const int fd = open(path.c_str(), O_PATH | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("landlock: open ", path, ": ", strerror(errno)));
  }
  struct stat st {};
  if (fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode)) {
    access &= LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE |
              LANDLOCK_ACCESS_FS_READ_FILE | kLandlockTruncate;
  }
  landlock_path_beneath_attr rule{};
  rule.allowed_access = access;
  rule.parent_fd = fd;
  const long rc = syscall(__NR_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule, 0);
  const int e = errno;
  close(fd);
  if (rc != 0)
    return absl::InternalError(absl::StrCat("landlock: rule for ", path, ": ", strerror(e)));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<const std::vector<sock_filter>*> SandboxSeccompFilter() {
  static const auto* compiled = new absl::StatusOr<std::vector<sock_filter>>(Compile());
  if (!compiled->ok()) return compiled->status();
  return &**compiled;
}

absl::StatusOr<int> SeccompFilterFd() {
  absl::StatusOr<const std::vector<sock_filter>*> filter = SandboxSeccompFilter();
  if (!filter.ok()) return filter.status();
  const int fd = memfd_create("trellis-seccomp", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return absl::InternalError(absl::StrCat("seccomp filter: memfd: ", strerror(errno)));
  const size_t bytes = (*filter)->size() * sizeof(sock_filter);
  if (write(fd, (*filter)->data(), bytes) != static_cast<ssize_t>(bytes) ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0 ||
      lseek(fd, 0, SEEK_SET) != 0) {
    const int e = errno;
    close(fd);
    return absl::InternalError(absl::StrCat("seccomp filter: memfd: ", strerror(e)));
  }
  return fd;
}

int LandlockAbi() {
  const long abi =
      syscall(__NR_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  return abi > 0 ? static_cast<int>(abi) : 0;
}

absl::StatusOr<int> LandlockRuleset(const std::vector<std::string>& read_only,
                                    const std::vector<std::string>& writable) {
  const int abi = LandlockAbi();
  if (abi == 0) return absl::UnimplementedError("landlock is not available in this kernel");
  RulesetAttr attr;
  attr.handled_access_fs = HandledAccess(abi);
  // From ABI 6 on: no signals to, and no abstract unix sockets of,
  // processes outside the sandbox.
  size_t size = sizeof(attr.handled_access_fs);
  if (abi >= 6) {
    attr.scoped = kScopeAbstractUnixSocket | kScopeSignal;
    size = sizeof(attr);
  }
  const long ruleset = syscall(__NR_landlock_create_ruleset, &attr, size, 0);
  if (ruleset < 0) {
    return absl::InternalError(absl::StrCat("landlock: create ruleset: ", strerror(errno)));
  }
  const int fd = static_cast<int>(ruleset);
  const uint64_t read_exec =
      LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR;
  absl::Status s;
  for (const std::string& p : read_only) {
    if (s.ok()) s = AddRule(fd, p, read_exec);
  }
  for (const std::string& p : writable) {
    if (s.ok()) s = AddRule(fd, p, attr.handled_access_fs);
  }
  if (!s.ok()) {
    close(fd);
    return s;
  }
  return fd;
}

}  // namespace trellis::plugin
