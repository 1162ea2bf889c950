#ifndef TRELLIS_LEDGER_MEMORY_LIMIT_H_
#define TRELLIS_LEDGER_MEMORY_LIMIT_H_

// memory.process_memory_limit_bytes at run time: a process whose measured
// peak resident memory (its ledger's ProcessAccount: VmHWM from /proc, or
// the sampler a test installs, ledger/process_memory.h) passes the limit
// stops. Checked by the loop's driver at every step's end (an embedded
// run's one process; a launched run's scheduler) and by a launched worker
// at every heartbeat (launch/worker.cc): the high-water mark keeps a peak
// reached between two checks. `trellis plan` and every command that runs a
// job price the processes against the same limit before anything runs
// (config/rank_memory.h).

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "ledger/ledger.h"

namespace trellis::ledger {

// The objects named in the message, largest first.
inline constexpr int kLimitObjectsNamed = 3;

// ResourceExhausted when `limit_bytes` > 0 and the process's peak resident
// memory is above it, naming `process`, its peak, the limit and the
// largest objects of `ledger` (each at its peak); OK otherwise.
[[nodiscard]] absl::Status CheckProcessMemoryLimit(Ledger& ledger, int64_t limit_bytes,
                                                   std::string_view process);
// The same against `peak_resident_bytes` the caller read already
// (ProcessMemoryAccount::peak_resident_bytes).
[[nodiscard]] absl::Status CheckProcessMemoryLimit(Ledger& ledger, int64_t limit_bytes,
                                                   std::string_view process,
                                                   int64_t peak_resident_bytes);

}  // namespace trellis::ledger

#endif  // TRELLIS_LEDGER_MEMORY_LIMIT_H_
