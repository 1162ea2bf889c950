#ifndef TRELLIS_LEDGER_PROCESS_MEMORY_PROTO_H_
#define TRELLIS_LEDGER_PROCESS_MEMORY_PROTO_H_

// A worker process's memory (ledger/process_memory.h) as its LedgerReport
// carries it to the scheduler (v1::ProcessMemory), and back.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ledger/process_memory.h"
#include "trellis/v1/scheduler.pb.h"

namespace trellis::ledger {

// The most bytes a figure a worker reports may give: 2^48 (256 TiB), far
// above any object, move or process of a worker, so that a figure beyond
// it is a broken or hostile worker's, not a number for the ledger's sums.
inline constexpr int64_t kMaxReportedBytes = int64_t{1} << 48;

// InvalidArgument naming `field` unless 0 <= bytes <= kMaxReportedBytes.
[[nodiscard]] absl::Status CheckReportedBytes(absl::string_view field, int64_t bytes);

// The account's inputs: its peak, the sample at it, the tensors and
// objects then, and the baseline.
v1::ProcessMemory ProcessMemoryToProto(const ProcessMemoryAccount& account);

// The account a worker's ledger would make of `process` (AccountFor), or
// InvalidArgument naming the first bad field under `where` (e.g.
// "process."): every figure within CheckReportedBytes.
[[nodiscard]] absl::StatusOr<ProcessMemoryAccount> ProcessMemoryFromProto(
    const v1::ProcessMemory& process, absl::string_view where);

}  // namespace trellis::ledger

#endif  // TRELLIS_LEDGER_PROCESS_MEMORY_PROTO_H_
