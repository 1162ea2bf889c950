#ifndef TRELLIS_LEDGER_PROCESS_MEMORY_H_
#define TRELLIS_LEDGER_PROCESS_MEMORY_H_

// What a process really holds, beside the objects its roles report: its
// resident memory (/proc/self/status VmRSS, and VmHWM, the highest since
// it started), the C heap's bytes in use and held (glibc mallinfo2), and
// the program's own memory before any job (code, libraries, thread
// stacks, BLAS buffers: the first sample, ProcessBaseline()). The ledger
// samples it at every span's end, every object report and every step's
// end (ProcessMemoryWatch), and names the process's peak resident memory
// part by part (ProcessMemoryAccount): what is left is its own line.
//
// No LibTorch: c10's tensors are on the C heap, which this counts whole.

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace trellis::ledger {

// One look at the process.
struct ProcessSample {
  // VmRSS and VmHWM.
  int64_t resident_bytes = 0;
  int64_t peak_resident_bytes = 0;
  // RssFile: resident pages of mapped files (code, libraries, weights read
  // in place); 0 where the kernel does not say.
  int64_t file_resident_bytes = 0;
  // The C heap: bytes of live blocks (uordblks + hblkhd), and bytes it
  // holds from the system, free blocks included (arena + hblkhd).
  int64_t heap_in_use_bytes = 0;
  int64_t heap_held_bytes = 0;
};

// VmRSS, VmHWM and RssFile of /proc/<pid>/status text (kB there, bytes
// here). InvalidArgument naming the field when VmRSS or VmHWM is missing
// or any of them is malformed.
[[nodiscard]] absl::StatusOr<ProcessSample> ParseProcStatus(std::string_view text);

// The heap's in-use and held bytes from mallinfo2's fields.
void SetHeap(uint64_t arena, uint64_t uordblks, uint64_t hblkhd, ProcessSample& sample);

// A sample of this process (zeros where /proc or mallinfo2 is missing), or
// the fake's that SetProcessSamplerForTesting installed.
ProcessSample SampleProcess();
// Replaces SampleProcess's source for the whole process (nullptr: the
// real one again). Tests only.
void SetProcessSamplerForTesting(std::function<ProcessSample()> sampler);
// The first sample the process took (by this call or a ledger's): the
// program before any job.
ProcessSample ProcessBaseline();

// The counters at a sample: the memory tracker's (ledger/memory_tracker.h)
// c10 live tensor bytes, their peak since the previous sample, and the part
// of each in blocks glibc maps on their own and gives back to the system
// when freed (MemoryTracker::kMappedFloor); and where the malloc hook counts
// (ledger/heap_count.h), the heap's live bytes and their peak since the
// previous sample.
struct TrackerLook {
  int64_t live_bytes = 0;
  int64_t peak_since_bytes = 0;
  int64_t mapped_bytes = 0;
  int64_t mapped_at_peak_bytes = 0;
  bool heap_counted = false;
  int64_t heap_live_bytes = 0;
  int64_t heap_peak_since_bytes = 0;
};

// A process's peak resident memory, named part by part. Every field is
// non-negative; the parts, remainder included, add up to
// peak_resident_bytes plus named_beyond_resident_bytes.
struct ProcessMemoryAccount {
  // VmHWM: the highest resident memory the process ever had.
  int64_t peak_resident_bytes = 0;
  // The sample that saw the most resident memory (where the high-water
  // mark rose inside a window, the sample standing for that mark:
  // ProcessMemoryWatch::Observe), and what was in it.
  ProcessSample at_peak;
  int64_t tracked_bytes = 0;  // c10 tensors live (the memory tracker)
  int64_t objects_bytes = 0;  // the roles' objects of this process
  ProcessSample baseline;
  // The parts: the program before any job; the roles' objects on the C
  // heap (at most what the tracker counted); tensors no object names; the
  // rest of the heap's growth in use (std containers, tokenizers, gRPC
  // buffers); the allocator's free blocks held beyond the baseline's;
  // mapped files' resident pages beyond the baseline's (weights read in
  // place, libraries loaded later).
  int64_t program_bytes = 0;
  int64_t objects_bytes_named = 0;
  int64_t other_tensors_bytes = 0;
  int64_t other_heap_bytes = 0;
  int64_t allocator_free_bytes = 0;
  int64_t mapped_files_bytes = 0;
  int64_t named_bytes = 0;
  // peak_resident - named when positive (nothing names it: thread stacks
  // and BLAS buffers made after the baseline, or a peak between samples),
  // and named - peak_resident when positive (named bytes not resident:
  // heap pages never touched or given back).
  int64_t remainder_bytes = 0;
  int64_t named_beyond_resident_bytes = 0;

  // named / peak_resident, at most 1 (0 without a measurement).
  double named_fraction() const;
};

// Names `peak_resident` from the sample at it and the baseline.
ProcessMemoryAccount AccountFor(int64_t peak_resident, const ProcessSample& at_peak,
                                int64_t tracked_bytes, int64_t objects_bytes,
                                const ProcessSample& baseline);

// summary.json memory.process (ledger/README.md).
nlohmann::json ProcessMemoryAccountJson(const ProcessMemoryAccount& a);

// The samples of one ledger: the run's most resident one, each stage's
// highest resident memory, and the current step's. Thread-safe.
class ProcessMemoryWatch {
 public:
  explicit ProcessMemoryWatch(ProcessSample baseline) : baseline_(baseline) {}
  // A sample taken in `stage` ("none": between spans), with the tracker
  // and the process's objects at that moment (a look whose peak is below
  // its live bytes counts as peaking at them). Where the high-water mark
  // rose since the previous sample, the sample stands for that mark:
  // resident at it, with the blocks freed since the heap's peak (where the
  // hook counts it; else since the tracker's peak) counted in use on the
  // heap, and the tensors among them glibc had mapped on their own counted
  // held too (they left the heap when freed).
  void Observe(const ProcessSample& sample, const TrackerLook& tracker, int64_t objects_bytes,
               std::string_view stage);
  // The step's highest resident memory so far, and starts a new step.
  int64_t TakeStepPeak();
  ProcessMemoryAccount Account() const;
  // Highest resident bytes seen in each stage.
  std::map<std::string, int64_t> StagePeaks() const;

 private:
  const ProcessSample baseline_;
  mutable absl::Mutex mu_;
  ProcessSample top_ ABSL_GUARDED_BY(mu_);
  int64_t top_tracked_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t top_objects_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t hwm_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t step_peak_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int64_t> stage_peaks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trellis::ledger

#endif  // TRELLIS_LEDGER_PROCESS_MEMORY_H_
