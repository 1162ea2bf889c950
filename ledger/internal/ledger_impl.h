#ifndef TRELLIS_LEDGER_INTERNAL_LEDGER_IMPL_H_
#define TRELLIS_LEDGER_INTERNAL_LEDGER_IMPL_H_

// The ledger's state, shared by ledger.cc (recording, summary) and
// ledger_resume.cc (resuming a run's ledger). Private to ledger/.

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "env/env.h"
#include "ledger/internal/moves.h"
#include "ledger/internal/role_busy.h"
#include "ledger/internal/sample_windows.h"
#include "ledger/internal/source_windows.h"
#include "ledger/ledger.h"
#include "ledger/memory_tracker.h"
#include "ledger/process_memory.h"

namespace trellis::ledger {
namespace internal {

// The seconds and bytes gathered since the current step began.
struct StepAccum {
  std::array<double, kNumStages> stage_seconds{};
  RoleBusy role_busy;
  std::array<double, kNumStages> stage_flops{};
  double handoff_seconds = 0;
  int64_t handoff_bytes = 0;
  int64_t moves = 0;
  int64_t move_bytes = 0;
  double move_seconds = 0;
};

// One RecordObject call: what (role, object) was before and after it.
struct ObjectEvent {
  std::string role;
  int object = 0;
  int64_t before = 0;
  int64_t bytes = 0;
  int64_t step = -1;
  Stage stage = Stage::kLoad;
};

// A device whose memory the ledger measures (Ledger::AddDeviceMemory).
struct Device {
  Device(std::unique_ptr<MemorySource> s, std::vector<std::string> r)
      : source(std::move(s)), windows(source.get()), roles(std::move(r)) {}
  const std::unique_ptr<MemorySource> source;
  SourceWindows windows;
  // The roles whose objects its peaks are attributed to; empty: every role.
  const std::vector<std::string> roles;
};

// One device's window over a span or step.
struct DeviceWindow {
  Device* device = nullptr;
  int id = 0;
};

// A device's run peaks: the highest allocated and the highest reserved
// bytes of any span or step, and the stage that first reached the first.
struct DevicePeak {
  int64_t allocated_bytes = 0;
  int64_t reserved_bytes = 0;
  std::string stage;
};

// {"allocated_bytes", "reserved_bytes", "peak_allocated_bytes",
//  "peak_reserved_bytes", "fragmentation_bytes"} of one device's window.
inline nlohmann::json DeviceWindowJson(const MemoryStats& m) {
  return {{"allocated_bytes", m.allocated_bytes},
          {"reserved_bytes", m.reserved_bytes},
          {"peak_allocated_bytes", m.peak_allocated_bytes},
          {"peak_reserved_bytes", m.peak_reserved_bytes},
          {"fragmentation_bytes", m.peak_reserved_bytes - m.peak_allocated_bytes}};
}

// `s` with "ledger: " before its message.
inline absl::Status InLedger(const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat("ledger: ", s.message()));
}

// The stage recorded as memory.peak_stage when the run's peak was seen by
// the step's window but inside no span.
inline constexpr char kNoStage[] = "none";

}  // namespace internal

struct Ledger::Impl {
  explicit Impl(env::Env* env) : env(env), t0(now()) { step_begin = t0; }

  double now() const { return env->MonotonicSeconds(); }

  // Writes records to `path` from now on (emptied first with `truncate`),
  // which holds `kept` records already.
  absl::Status OpenFile(const std::string& path, bool truncate, int64_t kept)
      ABSL_LOCKS_EXCLUDED(mu) {
    absl::StatusOr<std::unique_ptr<env::AppendableFile>> file = env->OpenAppendable(path, truncate);
    if (!file.ok()) return internal::InLedger(file.status());
    absl::MutexLock lock(&mu);
    out = *std::move(file);
    records = kept;
    write_status = absl::OkStatus();
    return absl::OkStatus();
  }

  // REQUIRES: mu held. Appends one line to ledger.jsonl, if open, whole or
  // not at all; after a failed write nothing more is written (write_status
  // says why). Hands the line to the observers first, if any.
  void Write(const nlohmann::json& record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const bool to_file = out != nullptr && write_status.ok();
    if (!to_file && observers.empty()) return;
    std::string line = record.dump();
    for (const auto& [id, observe] : observers) observe(line);
    if (!to_file) return;
    line += '\n';
    if (absl::Status s = out->Append(line); !s.ok()) {
      write_status = absl::Status(
          s.code(), absl::StrCat("ledger: ", s.message(), " (after ", records, " records)"));
      return;
    }
    ++records;
  }

  // REQUIRES: mu held. Current bytes of `o`, summed over the roles.
  int64_t ObjectBytes(int o) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    int64_t sum = 0;
    for (const auto& [role, bytes] : object_bytes[o]) sum += bytes;
    return sum;
  }

  // REQUIRES: mu held. A look at the process's resident memory and heap
  // in `stage`, with the counters and the objects now, and the counters'
  // peaks since the previous look; returns the resident bytes.
  int64_t SampleProcessMemory(std::string_view stage) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    int64_t objects = 0;
    for (int o = 0; o < kNumObjects; ++o) {
      for (const auto& [role, bytes] : object_bytes[o]) {
        if (!remote_roles.contains(role)) objects += bytes;
      }
    }
    const ProcessSample sample = SampleProcess();
    process_memory.Observe(sample, sample_windows.Take(), objects, stage);
    return sample.resident_bytes;
  }

  // REQUIRES: mu held. A peak measured in a window that opened when
  // object_seq was `since`. A new run peak lists the objects live during
  // that window: non-zero now, or non-zero at some record since.
  void ObservePeak(int64_t bytes, std::string_view stage, int64_t since)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (bytes <= peak) return;
    peak = bytes;
    peak_stage = std::string(stage);
    live_at_peak.clear();
    for (int o = 0; o < kNumObjects; ++o) {
      if (ObjectBytes(o) > 0 || object_live_seq[o] > since) {
        live_at_peak.emplace_back(ObjectName(static_cast<Object>(o)));
      }
    }
  }

  // REQUIRES: mu held. Attributes a span's measured peak: each role's
  // objects at the moment since object_seq was `since` (the span's start,
  // or just after one of its reports) when that role's objects summed
  // largest. A role that reports one call's transients (KV cache and
  // workspace, say) and frees them before the next call's counts the
  // largest call's together, not each object's largest of any call.
  // Only the objects of `roles` count (every role's when it is empty), and
  // never another process's (RecordRemoteObject).
  PeakAttribution Attribute(std::string_view role, Stage stage, int64_t since, int64_t measured,
                            const std::vector<std::string>& roles = {}) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    // The sizes when the span began: now, before each report since then.
    std::map<std::pair<std::string, int>, int64_t> held;
    for (int o = 0; o < kNumObjects; ++o) {
      for (const auto& [r, bytes] : object_bytes[o]) held[{r, o}] = bytes;
    }
    for (size_t i = history.size(); i > static_cast<size_t>(since); --i) {
      const internal::ObjectEvent& e = history[i - 1];
      held[{e.role, e.object}] = e.before;
    }
    std::map<std::string, int64_t> role_sum;
    for (const auto& [key, bytes] : held) role_sum[key.first] += bytes;
    std::map<std::pair<std::string, int>, int64_t> largest = held;
    std::map<std::string, int64_t> largest_sum = role_sum;
    for (size_t i = static_cast<size_t>(since); i < history.size(); ++i) {
      const internal::ObjectEvent& e = history[i];
      int64_t& bytes = held[{e.role, e.object}];
      int64_t& sum = role_sum[e.role];
      sum += e.bytes - bytes;
      bytes = e.bytes;
      if (sum <= largest_sum[e.role]) continue;
      largest_sum[e.role] = sum;
      for (auto it = held.lower_bound({e.role, 0}); it != held.end() && it->first.first == e.role;
           ++it) {
        largest[it->first] = it->second;
      }
    }
    PeakAttribution peak;
    peak.role = std::string(role);
    peak.stage = std::string(StageName(stage));
    peak.step = step;
    peak.measured_bytes = measured;
    for (const auto& [key, bytes] : largest) {
      if (bytes <= 0 || remote_roles.contains(key.first)) continue;
      if (!roles.empty() && std::find(roles.begin(), roles.end(), key.first) == roles.end()) {
        continue;
      }
      peak.objects.push_back(
          {key.first, std::string(ObjectName(static_cast<Object>(key.second))), bytes});
      peak.attributed_bytes += bytes;
    }
    std::stable_sort(peak.objects.begin(), peak.objects.end(),
                     [](const ObjectShare& a, const ObjectShare& b) { return a.bytes > b.bytes; });
    peak.unattributed_bytes = measured - peak.attributed_bytes;
    return peak;
  }

  // REQUIRES: mu held. A device window's peaks, seen at a span's end
  // (`role` non-empty: a role's device peak is attributed too) or a step's
  // (with kNoStage); returns its record.
  nlohmann::json ObserveDevice(const internal::Device& device, const MemoryStats& m,
                               std::string_view role, Stage stage, std::string_view stage_name,
                               int64_t since) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const std::string name = device.source->name();
    internal::DevicePeak& run = device_peaks[name];
    if (m.peak_allocated_bytes > run.allocated_bytes) {
      run.allocated_bytes = m.peak_allocated_bytes;
      run.stage = std::string(stage_name);
    }
    run.reserved_bytes = std::max(run.reserved_bytes, m.peak_reserved_bytes);
    auto& peaks = device_role_peaks[name];
    auto it = peaks.find(role);
    if (!role.empty() && m.peak_allocated_bytes > 0 &&
        (it == peaks.end() || m.peak_allocated_bytes > it->second.measured_bytes)) {
      PeakAttribution p = Attribute(role, stage, since, m.peak_allocated_bytes, device.roles);
      p.device = name;
      p.reserved_bytes = m.peak_reserved_bytes;
      peaks[std::string(role)] = std::move(p);
    }
    return internal::DeviceWindowJson(m);
  }

  // REQUIRES: mu held. Closes `windows` and observes their peaks; the
  // records' "device_memory" object.
  nlohmann::json CloseDeviceWindows(const std::vector<internal::DeviceWindow>& windows,
                                    std::string_view role, Stage stage, std::string_view stage_name,
                                    int64_t since) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    nlohmann::json out = nlohmann::json::object();
    for (const internal::DeviceWindow& w : windows) {
      out[w.device->source->name()] =
          ObserveDevice(*w.device, w.device->windows.Close(w.id), role, stage, stage_name, since);
    }
    return out;
  }

  // REQUIRES: mu held. A window on every device added.
  std::vector<internal::DeviceWindow> OpenDeviceWindows() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::vector<internal::DeviceWindow> windows;
    for (const auto& d : devices) windows.push_back({d.get(), d->windows.Open()});
    return windows;
  }

  void EndSpan(Stage stage, const std::string& role, double start, int64_t start_seq,
               double seconds, int64_t peak_bytes, int64_t live_bytes,
               const std::vector<internal::DeviceWindow>& device_windows) ABSL_LOCKS_EXCLUDED(mu) {
    absl::MutexLock lock(&mu);
    cur.stage_seconds[static_cast<int>(stage)] += seconds;
    cur.role_busy.Add(role, start, start + seconds);
    stage_totals[static_cast<int>(stage)] += seconds;
    ObservePeak(peak_bytes, StageName(stage), start_seq);
    auto it = role_peaks.find(role);
    if (peak_bytes > 0 && (it == role_peaks.end() || peak_bytes > it->second.measured_bytes)) {
      role_peaks[role] = Attribute(role, stage, start_seq, peak_bytes);
    }
    nlohmann::json record = {{"type", "span"},
                             {"step", step},
                             {"stage", StageName(stage)},
                             {"role", role},
                             {"start", start - t0},
                             {"seconds", seconds},
                             {"peak_bytes", peak_bytes},
                             {"live_bytes", live_bytes},
                             {"resident_bytes", SampleProcessMemory(StageName(stage))}};
    if (!device_windows.empty()) {
      record["device_memory"] =
          CloseDeviceWindows(device_windows, role, stage, StageName(stage), start_seq);
    }
    Write(record);
  }

  env::Env* const env;
  // now() at the run's start; ImportState moves it back by the seconds
  // the run had before a resume.
  double t0;

  mutable absl::Mutex mu;
  // Worker processes: where RecordObject and RecordMove also send each record.
  Ledger::RecordForward forward ABSL_GUARDED_BY(mu);
  std::vector<std::pair<Ledger::ObserverId, Ledger::RecordObserver>> observers ABSL_GUARDED_BY(mu);
  Ledger::ObserverId next_observer ABSL_GUARDED_BY(mu) = 0;
  std::unique_ptr<env::AppendableFile> out ABSL_GUARDED_BY(mu);
  int64_t records ABSL_GUARDED_BY(mu) = 0;
  absl::Status write_status ABSL_GUARDED_BY(mu);

  // The current step.
  int64_t step ABSL_GUARDED_BY(mu) = -1;
  double step_begin ABSL_GUARDED_BY(mu) = 0;
  int64_t step_begin_seq ABSL_GUARDED_BY(mu) = 0;
  std::unique_ptr<PeakWindow> step_window ABSL_GUARDED_BY(mu);
  internal::StepAccum cur ABSL_GUARDED_BY(mu);

  // Run totals.
  int64_t steps ABSL_GUARDED_BY(mu) = 0;
  std::array<double, kNumStages> stage_totals ABSL_GUARDED_BY(mu){};
  std::array<double, kNumStages> flops_totals ABSL_GUARDED_BY(mu){};
  double matmul_peak ABSL_GUARDED_BY(mu) = 0;
  StepCounts count_totals ABSL_GUARDED_BY(mu);
  // The last step record (StepMetricsJson), null before the first step.
  nlohmann::json last_step ABSL_GUARDED_BY(mu);
  int64_t handoff_count ABSL_GUARDED_BY(mu) = 0;
  int64_t handoff_bytes ABSL_GUARDED_BY(mu) = 0;
  double handoff_seconds ABSL_GUARDED_BY(mu) = 0;
  internal::MoveTotals moves ABSL_GUARDED_BY(mu);
  std::map<std::string, EvalMetrics> evals ABSL_GUARDED_BY(mu);
  // Per verifier name: sums of the counts and seconds (latency_p50_seconds
  // unused, latency_p99_seconds the highest of any record).
  std::map<std::string, v1::VerifierStats> verifier_totals ABSL_GUARDED_BY(mu);

  // Memory: the tracker's run peak and the objects the roles reported.
  int64_t peak ABSL_GUARDED_BY(mu) = 0;
  std::string peak_stage ABSL_GUARDED_BY(mu) = internal::kNoStage;
  std::vector<std::string> live_at_peak ABSL_GUARDED_BY(mu);
  // Latest bytes of each object, by role.
  std::array<std::map<std::string, int64_t, std::less<>>, kNumObjects>
      object_bytes ABSL_GUARDED_BY(mu);
  std::array<int64_t, kNumObjects> object_peak ABSL_GUARDED_BY(mu){};
  // Counts RecordObject calls; object_live_seq[o] is the count at the last
  // record that found or left object o non-zero.
  int64_t object_seq ABSL_GUARDED_BY(mu) = 0;
  std::array<int64_t, kNumObjects> object_live_seq ABSL_GUARDED_BY(mu){};
  // Every RecordObject call of this process, in order: history[s - 1] is
  // the call that made object_seq s.
  std::vector<internal::ObjectEvent> history ABSL_GUARDED_BY(mu);
  // Each role's highest span peak so far, attributed.
  std::map<std::string, PeakAttribution, std::less<>> role_peaks ABSL_GUARDED_BY(mu);
  // Roles whose objects another process holds (RecordRemoteObject).
  std::set<std::string, std::less<>> remote_roles ABSL_GUARDED_BY(mu);
  // What the process holds: resident memory, heap, the program's baseline
  // (the process's first sample: its first ledger's construction).
  ProcessMemoryWatch process_memory{ProcessBaseline()};
  // The counters' peaks since the previous sample (or the ledger's start).
  internal::SampleWindows sample_windows ABSL_GUARDED_BY(mu);
  // Each launched worker's process, as it last reported it.
  std::map<std::string, ProcessMemoryAccount> remote_processes ABSL_GUARDED_BY(mu);

  // Device memory (AddDeviceMemory): the devices, the step's windows on
  // them, and by device name its run peaks and each role's highest span
  // peak on it, attributed.
  std::vector<std::unique_ptr<internal::Device>> devices ABSL_GUARDED_BY(mu);
  std::vector<internal::DeviceWindow> step_device_windows ABSL_GUARDED_BY(mu);
  std::map<std::string, internal::DevicePeak> device_peaks ABSL_GUARDED_BY(mu);
  std::map<std::string, std::map<std::string, PeakAttribution, std::less<>>> device_role_peaks
      ABSL_GUARDED_BY(mu);
};

}  // namespace trellis::ledger

#endif  // TRELLIS_LEDGER_INTERNAL_LEDGER_IMPL_H_
