#ifndef TRELLIS_PLUGIN_CONFINE_H_
#define TRELLIS_PLUGIN_CONFINE_H_

// The kernel-side confinement of an untrusted program, prepared in the
// parent before fork so that the child only has to install it with
// async-signal-safe system calls (plugin/process.cc).
//
// The seccomp filter (Debian's libseccomp) lets every system call through
// except these, which fail with EPERM:
//   ptrace, process_vm_readv/writev, mount, umount2, pivot_root, chroot,
//   kexec_load, kexec_file_load, bpf, keyctl, add_key, request_key,
//   unshare, setns, perf_event_open, userfaultfd, io_uring_*, the module,
//   reboot, swap, clock-setting, quota and handle-open calls, and
//   setsid / setpgid (a descendant cannot leave the process group, so one
//   SIGKILL to the group reaches every descendant);
// clone with any namespace flag fails with EPERM, clone3 with ENOSYS (libc
// then falls back to clone, whose flags the filter can read), and socket()
// of any family but AF_UNIX fails with EAFNOSUPPORT.
//
// Landlock (Linux 5.13+, unprivileged) confines the kRlimits fallback's
// file access to read-only system directories and one writable directory.

#include <linux/filter.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trellis::plugin {

// The filter above as a BPF program for this machine's architecture;
// compiled once. Internal when libseccomp fails.
[[nodiscard]] absl::StatusOr<const std::vector<sock_filter>*> SandboxSeccompFilter();

// A sealed memfd holding the filter, positioned at its start, for
// bubblewrap's --seccomp FD. Close-on-exec: the spawn passes it on
// explicitly (SpawnOptions::inherit_fds).
[[nodiscard]] absl::StatusOr<int> SeccompFilterFd();

// The Landlock ABI version of this kernel, 0 when Landlock is unavailable.
int LandlockAbi();

// A Landlock ruleset (an fd, close-on-exec) that allows reading and
// executing under `read_only` paths (missing ones skipped) and all file
// access under `writable`, and nothing else of the file system; where the
// kernel can (Landlock ABI 6), no signals to processes outside the sandbox
// and no abstract unix sockets of the host either.
// Unimplemented when Landlock is unavailable.
[[nodiscard]] absl::StatusOr<int> LandlockRuleset(const std::vector<std::string>& read_only,
                                                  const std::vector<std::string>& writable);

}  // namespace trellis::plugin

#endif  // TRELLIS_PLUGIN_CONFINE_H_
