#include "ledger/process_memory_proto.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace trellis::ledger {
namespace {

v1::ProcessSample SampleToProto(const ProcessSample& s) {
  v1::ProcessSample p;
  p.set_resident_bytes(s.resident_bytes);
  p.set_peak_resident_bytes(s.peak_resident_bytes);
  p.set_file_resident_bytes(s.file_resident_bytes);
  p.set_heap_in_use_bytes(s.heap_in_use_bytes);
  p.set_heap_held_bytes(s.heap_held_bytes);
  return p;
}

absl::StatusOr<ProcessSample> SampleFromProto(const v1::ProcessSample& p,
                                              const std::string& where) {
  const std::pair<const char*, int64_t> fields[] = {
      {"resident_bytes", p.resident_bytes()},
      {"peak_resident_bytes", p.peak_resident_bytes()},
      {"file_resident_bytes", p.file_resident_bytes()},
      {"heap_in_use_bytes", p.heap_in_use_bytes()},
      {"heap_held_bytes", p.heap_held_bytes()}};
  for (const auto& [name, bytes] : fields) {
    if (absl::Status s = CheckReportedBytes(where + name, bytes); !s.ok()) return s;
  }
  return ProcessSample{.resident_bytes = p.resident_bytes(),
                       .peak_resident_bytes = p.peak_resident_bytes(),
                       .file_resident_bytes = p.file_resident_bytes(),
                       .heap_in_use_bytes = p.heap_in_use_bytes(),
                       .heap_held_bytes = p.heap_held_bytes()};
}

}  // namespace

absl::Status CheckReportedBytes(absl::string_view field, int64_t bytes) {
  if (bytes >= 0 && bytes <= kMaxReportedBytes) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": must be in [0, 2^48 = ", kMaxReportedBytes, "], found ", bytes));
}

v1::ProcessMemory ProcessMemoryToProto(const ProcessMemoryAccount& account) {
  v1::ProcessMemory p;
  p.set_peak_resident_bytes(account.peak_resident_bytes);
  *p.mutable_at_peak() = SampleToProto(account.at_peak);
  p.set_tracked_bytes(account.tracked_bytes);
  p.set_objects_bytes(account.objects_bytes);
  *p.mutable_baseline() = SampleToProto(account.baseline);
  return p;
}

absl::StatusOr<ProcessMemoryAccount> ProcessMemoryFromProto(const v1::ProcessMemory& process,
                                                            absl::string_view where) {
  const std::string prefix(where);
  const std::pair<const char*, int64_t> fields[] = {
      {"peak_resident_bytes", process.peak_resident_bytes()},
      {"tracked_bytes", process.tracked_bytes()},
      {"objects_bytes", process.objects_bytes()}};
  for (const auto& [name, bytes] : fields) {
    if (absl::Status s = CheckReportedBytes(prefix + name, bytes); !s.ok()) return s;
  }
  absl::StatusOr<ProcessSample> at_peak = SampleFromProto(process.at_peak(), prefix + "at_peak.");
  if (!at_peak.ok()) return at_peak.status();
  absl::StatusOr<ProcessSample> baseline =
      SampleFromProto(process.baseline(), prefix + "baseline.");
  if (!baseline.ok()) return baseline.status();
  return AccountFor(process.peak_resident_bytes(), *at_peak, process.tracked_bytes(),
                    process.objects_bytes(), *baseline);
}

}  // namespace trellis::ledger
