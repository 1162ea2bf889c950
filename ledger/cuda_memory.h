#ifndef TRELLIS_LEDGER_CUDA_MEMORY_H_
#define TRELLIS_LEDGER_CUDA_MEMORY_H_

// The CUDA caching allocator of a device as a MemorySource, for
// Ledger::AddDeviceMemory (docs/gpu.md, "The ledger on CUDA"): c10's
// device stats, summed over the allocator's pools, of allocated_bytes (its
// live blocks) and reserved_bytes (the segments it holds from the driver,
// live or cached), current and peak. The ledger owns the peaks
// (ResetPeakStats resets the device's): nothing else in the process should
// reset them.
//
// Library trellis::ledger_cuda. Its CUDA source is compiled only where
// LibTorch has CUDA (CMake's TRELLIS_CUDA); elsewhere these functions
// return Unimplemented, so callers need no #ifdef.

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "ledger/memory_source.h"

namespace trellis::ledger {

// Device `index` of the visible devices ("cuda:<index>"). FailedPrecondition
// when no CUDA device is visible; InvalidArgument for an index out of
// range.
[[nodiscard]] absl::StatusOr<std::unique_ptr<MemorySource>> CudaMemory(int index);

// One source per visible device, in index order.
[[nodiscard]] absl::StatusOr<std::vector<std::unique_ptr<MemorySource>>> CudaMemoryOfEveryDevice();

}  // namespace trellis::ledger

#endif  // TRELLIS_LEDGER_CUDA_MEMORY_H_
