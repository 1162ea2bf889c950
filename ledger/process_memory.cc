#include "ledger/process_memory.h"

#include <malloc.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace trellis::ledger {
namespace {

// "VmRSS:     1234 kB" -> 1234 * 1024 into `bytes`; false when `line` is
// not `field`'s. (This Abseil's string_view is its own.)
absl::StatusOr<bool> ParseKbLine(absl::string_view line, absl::string_view field, int64_t& bytes) {
  if (!absl::StartsWith(line, field) || line.size() <= field.size() || line[field.size()] != ':') {
    return false;
  }
  absl::string_view rest = absl::StripAsciiWhitespace(line.substr(field.size() + 1));
  int64_t kb = 0;
  if (!absl::ConsumeSuffix(&rest, "kB") ||
      !absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &kb) || kb < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("/proc status: ", field, ": expected '<kilobytes> kB', got '", line, "'"));
  }
  bytes = kb * 1024;
  return true;
}

absl::Mutex sampler_mu;
std::function<ProcessSample()>* sampler ABSL_GUARDED_BY(sampler_mu) = nullptr;

ProcessSample SampleReal() {
  ProcessSample s;
  std::ifstream in("/proc/self/status");
  std::stringstream text;
  text << in.rdbuf();
  if (absl::StatusOr<ProcessSample> parsed = ParseProcStatus(text.str()); parsed.ok()) s = *parsed;
  const struct mallinfo2 m = mallinfo2();
  SetHeap(m.arena, m.uordblks, m.hblkhd, s);
  return s;
}

int64_t Positive(int64_t v) { return std::max<int64_t>(0, v); }

}  // namespace

absl::StatusOr<ProcessSample> ParseProcStatus(std::string_view text) {
  ProcessSample s;
  bool rss = false;
  bool hwm = false;
  for (absl::string_view line : absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    absl::StatusOr<bool> got = ParseKbLine(line, "VmRSS", s.resident_bytes);
    if (!got.ok()) return got.status();
    rss = rss || *got;
    got = ParseKbLine(line, "VmHWM", s.peak_resident_bytes);
    if (!got.ok()) return got.status();
    hwm = hwm || *got;
    if (absl::StatusOr<bool> file = ParseKbLine(line, "RssFile", s.file_resident_bytes);
        !file.ok()) {
      return file.status();
    }
  }
  if (!rss || !hwm) {
    return absl::InvalidArgumentError(
        absl::StrCat("/proc status: no ", rss ? "VmHWM" : "VmRSS", " line"));
  }
  return s;
}

void SetHeap(uint64_t arena, uint64_t uordblks, uint64_t hblkhd, ProcessSample& sample) {
  sample.heap_in_use_bytes = static_cast<int64_t>(uordblks + hblkhd);
  sample.heap_held_bytes = static_cast<int64_t>(arena + hblkhd);
}

ProcessSample SampleProcess() {
  {
    absl::MutexLock lock(&sampler_mu);
    if (sampler != nullptr) return (*sampler)();
  }
  return SampleReal();
}

void SetProcessSamplerForTesting(std::function<ProcessSample()> fake) {
  absl::MutexLock lock(&sampler_mu);
  delete sampler;
  sampler = fake ? new std::function<ProcessSample()>(std::move(fake)) : nullptr;
}

ProcessSample ProcessBaseline() {
  static const ProcessSample baseline = SampleProcess();
  return baseline;
}

double ProcessMemoryAccount::named_fraction() const {
  if (peak_resident_bytes <= 0) return 0;
  return std::min(1.0, static_cast<double>(named_bytes) / static_cast<double>(peak_resident_bytes));
}

ProcessMemoryAccount AccountFor(int64_t peak_resident, const ProcessSample& at_peak,
                                int64_t tracked_bytes, int64_t objects_bytes,
                                const ProcessSample& baseline) {
  ProcessMemoryAccount a;
  a.peak_resident_bytes = std::max(peak_resident, at_peak.resident_bytes);
  a.at_peak = at_peak;
  a.tracked_bytes = tracked_bytes;
  a.objects_bytes = objects_bytes;
  a.baseline = baseline;
  a.program_bytes = baseline.resident_bytes;
  // The heap's growth since the baseline; c10's tensors are part of it.
  const int64_t in_use = Positive(at_peak.heap_in_use_bytes - baseline.heap_in_use_bytes);
  const int64_t tensors = std::min(Positive(tracked_bytes), in_use);
  a.objects_bytes_named = std::min(Positive(objects_bytes), tensors);
  a.other_tensors_bytes = tensors - a.objects_bytes_named;
  a.other_heap_bytes = in_use - tensors;
  a.allocator_free_bytes =
      Positive((at_peak.heap_held_bytes - at_peak.heap_in_use_bytes) -
               (baseline.heap_held_bytes - baseline.heap_in_use_bytes));
  a.mapped_files_bytes = Positive(at_peak.file_resident_bytes - baseline.file_resident_bytes);
  a.named_bytes = a.program_bytes + a.objects_bytes_named + a.other_tensors_bytes +
                  a.other_heap_bytes + a.allocator_free_bytes + a.mapped_files_bytes;
  a.remainder_bytes = Positive(a.peak_resident_bytes - a.named_bytes);
  a.named_beyond_resident_bytes = Positive(a.named_bytes - a.peak_resident_bytes);
  return a;
}

nlohmann::json ProcessMemoryAccountJson(const ProcessMemoryAccount& a) {
  return {{"peak_resident_bytes", a.peak_resident_bytes},
          {"resident_at_sample_bytes", a.at_peak.resident_bytes},
          {"heap_in_use_bytes", a.at_peak.heap_in_use_bytes},
          {"heap_held_bytes", a.at_peak.heap_held_bytes},
          {"tracked_bytes", a.tracked_bytes},
          {"objects_bytes", a.objects_bytes},
          {"file_resident_bytes", a.at_peak.file_resident_bytes},
          {"baseline", {{"resident_bytes", a.baseline.resident_bytes},
                        {"file_resident_bytes", a.baseline.file_resident_bytes},
                        {"heap_in_use_bytes", a.baseline.heap_in_use_bytes},
                        {"heap_held_bytes", a.baseline.heap_held_bytes}}},
          {"parts", {{"program", a.program_bytes},
                     {"objects", a.objects_bytes_named},
                     {"other_tensors", a.other_tensors_bytes},
                     {"other_heap", a.other_heap_bytes},
                     {"allocator_free", a.allocator_free_bytes},
                     {"mapped_files", a.mapped_files_bytes}}},
          {"named_bytes", a.named_bytes},
          {"remainder_bytes", a.remainder_bytes},
          {"named_beyond_resident_bytes", a.named_beyond_resident_bytes},
          {"named_fraction", a.named_fraction()}};
}

void ProcessMemoryWatch::Observe(const ProcessSample& sample, const TrackerLook& tracker,
                                 int64_t objects_bytes, std::string_view stage) {
  absl::MutexLock lock(&mu_);
  // A high-water mark that rose since the last sample was reached in
  // between, taken to be at the tracker's peak in between: the tensors
  // freed since were then in use on the heap too, and the mapped ones
  // among them held by it.
  ProcessSample at = sample;
  int64_t tracked = tracker.live_bytes;
  if (sample.peak_resident_bytes > hwm_) {
    const int64_t freed = Positive(tracker.peak_since_bytes - tracker.live_bytes);
    const int64_t freed_mapped =
        std::min(freed, Positive(tracker.mapped_at_peak_bytes - tracker.mapped_bytes));
    const int64_t freed_heap =
        tracker.heap_counted
            ? std::max(freed, Positive(tracker.heap_peak_since_bytes - tracker.heap_live_bytes))
            : freed;
    at.resident_bytes = std::max(sample.peak_resident_bytes, sample.resident_bytes);
    at.heap_in_use_bytes += freed_heap;
    at.heap_held_bytes = std::max(at.heap_held_bytes + freed_mapped, at.heap_in_use_bytes);
    tracked += freed;
  }
  if (at.resident_bytes > top_.resident_bytes) {
    top_ = at;
    top_tracked_ = tracked;
    top_objects_ = objects_bytes;
  }
  // A high-water mark that rose since the last sample was reached in
  // between, so in this sample's stage and step.
  const int64_t highest = sample.peak_resident_bytes > hwm_
                              ? std::max(sample.peak_resident_bytes, sample.resident_bytes)
                              : sample.resident_bytes;
  hwm_ = std::max(hwm_, sample.peak_resident_bytes);
  step_peak_ = std::max(step_peak_, highest);
  int64_t& stage_peak = stage_peaks_[std::string(stage)];
  stage_peak = std::max(stage_peak, highest);
}

int64_t ProcessMemoryWatch::TakeStepPeak() {
  absl::MutexLock lock(&mu_);
  return std::exchange(step_peak_, 0);
}

ProcessMemoryAccount ProcessMemoryWatch::Account() const {
  absl::MutexLock lock(&mu_);
  return AccountFor(hwm_, top_, top_tracked_, top_objects_, baseline_);
}

std::map<std::string, int64_t> ProcessMemoryWatch::StagePeaks() const {
  absl::MutexLock lock(&mu_);
  return stage_peaks_;
}

}  // namespace trellis::ledger
