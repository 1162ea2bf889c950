#include "ledger/memory_limit.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ledger/kinds.h"

namespace trellis::ledger {
namespace {

std::string MiB(int64_t bytes) {
  return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
}

}  // namespace

absl::Status CheckProcessMemoryLimit(Ledger& ledger, int64_t limit_bytes,
                                     std::string_view process) {
  if (limit_bytes <= 0) return absl::OkStatus();
  return CheckProcessMemoryLimit(ledger, limit_bytes, process,
                                 ledger.ProcessAccount().peak_resident_bytes);
}

absl::Status CheckProcessMemoryLimit(Ledger& ledger, int64_t limit_bytes,
                                     std::string_view process, int64_t peak) {
  if (limit_bytes <= 0 || peak <= limit_bytes) return absl::OkStatus();
  std::vector<std::pair<int64_t, Object>> objects;
  for (int o = 0; o < kNumObjects; ++o) {
    const Object object = static_cast<Object>(o);
    if (const int64_t bytes = ledger.object_peak_bytes(object); bytes > 0) {
      objects.emplace_back(bytes, object);
    }
  }
  std::sort(objects.begin(), objects.end(), [](const auto& a, const auto& b) {
    return a.first > b.first;
  });
  std::string largest;
  for (size_t i = 0; i < objects.size() && i < kLimitObjectsNamed; ++i) {
    absl::StrAppend(&largest, i == 0 ? "" : ", ", std::string(ObjectName(objects[i].second)), " ",
                    MiB(objects[i].first));
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      std::string(process), ": peak resident memory ", MiB(peak), " (", peak,
      " bytes) passed memory.process_memory_limit_bytes ", MiB(limit_bytes), " (", limit_bytes,
      " bytes); its largest objects: ", largest.empty() ? "none reported" : largest,
      " (`trellis plan` prices each process; raise the limit, deployment.learner.count or "
      "memory.zero_stage, or shrink the batch)"));
}

}  // namespace trellis::ledger
