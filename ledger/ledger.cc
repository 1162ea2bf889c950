#include "ledger/ledger.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "ledger/internal/ledger_impl.h"
#include "ledger/internal/metrics.h"
#include "ledger/memory_tracker.h"

namespace trellis::ledger {

using internal::kNoStage;
using internal::StepAccum;
using nlohmann::json;

int64_t PromptAccount::dropped_total() const {
  int64_t n = 0;
  for (const auto& [reason, count] : dropped) n += count;
  return n;
}

bool PromptAccount::Reconciles() const { return drawn == trained + dropped_total() + in_flight; }

// ---------------------------------------------------------------- Span

struct Ledger::Span::State {
  Ledger* ledger = nullptr;
  Stage stage = Stage::kLoad;
  std::string role;
  double start = 0;
  int64_t start_seq = 0;  // Impl::object_seq at the start.
  std::unique_ptr<PeakWindow> window;  // Null when the tracker is off.
  std::vector<internal::DeviceWindow> device_windows;
  bool ended = false;
  double seconds = 0;
};

Ledger::Span::Span(Ledger* ledger, Stage stage, std::string role)
    : state_(new State) {
  state_->ledger = ledger;
  state_->stage = stage;
  state_->role = std::move(role);
  if (MemoryTracker::installed()) {
    state_->window = std::make_unique<PeakWindow>();
  }
  Impl& impl = *ledger->impl_;
  {
    absl::MutexLock lock(&impl.mu);
    state_->start_seq = impl.object_seq;
    state_->device_windows = impl.OpenDeviceWindows();
  }
  state_->start = impl.now();
}

Ledger::Span::Span(Span&& other) noexcept
    : state_(std::exchange(other.state_, nullptr)) {}

Ledger::Span::~Span() {
  End();
  delete state_;
}

double Ledger::Span::End() {
  if (state_ == nullptr) return 0;
  State& s = *state_;
  if (s.ended) return s.seconds;
  Impl& impl = *s.ledger->impl_;
  s.seconds = std::max(0.0, impl.now() - s.start);
  int64_t peak_bytes = 0;
  int64_t live_bytes = 0;
  if (s.window != nullptr) {
    peak_bytes = s.window->peak_bytes();
    live_bytes = MemoryTracker::Get().live_bytes();
    s.window.reset();
  }
  s.ended = true;
  impl.EndSpan(s.stage, s.role, s.start, s.start_seq, s.seconds, peak_bytes, live_bytes,
               s.device_windows);
  return s.seconds;
}

// -------------------------------------------------------------- Ledger

Ledger::Ledger(env::Env* env) : impl_(new Impl(env)) {}

Ledger::~Ledger() { delete impl_; }

absl::Status Ledger::Open(const std::string& path) {
  return impl_->OpenFile(path, /*truncate=*/true, /*kept=*/0);
}

absl::Status Ledger::status() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->write_status;
}

env::Env* Ledger::env() const { return impl_->env; }

int64_t Ledger::current_step() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->step;
}

void Ledger::BeginStep(int64_t step) {
  const double now = impl_->now();
  absl::MutexLock lock(&impl_->mu);
  impl_->step = step;
  impl_->step_begin = now;
  impl_->step_begin_seq = impl_->object_seq;
  impl_->cur = StepAccum{};
  impl_->step_window.reset();  // Close the old window before opening one.
  if (MemoryTracker::installed()) {
    impl_->step_window = std::make_unique<PeakWindow>();
  }
  for (const internal::DeviceWindow& w : impl_->step_device_windows) w.device->windows.Close(w.id);
  impl_->step_device_windows = impl_->OpenDeviceWindows();
}

void Ledger::AddDeviceMemory(std::unique_ptr<MemorySource> source, std::vector<std::string> roles) {
  absl::MutexLock lock(&impl_->mu);
  impl_->devices.push_back(std::make_unique<internal::Device>(std::move(source), std::move(roles)));
}

Ledger::Span Ledger::Begin(Stage stage, std::string_view role) {
  return Span(this, stage, std::string(role));
}

void Ledger::RecordRemoteObject(std::string_view role, Object object, int64_t bytes,
                                Stage stage) {
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->remote_roles.insert(std::string(role));
  }
  RecordObject(role, object, bytes, stage);
}

ProcessMemoryAccount Ledger::ProcessAccount() {
  absl::MutexLock lock(&impl_->mu);
  impl_->SampleProcessMemory(kNoStage);
  return impl_->process_memory.Account();
}

void Ledger::RecordRemoteProcess(std::string_view role, const ProcessMemoryAccount& account) {
  absl::MutexLock lock(&impl_->mu);
  impl_->remote_processes[std::string(role)] = account;
}

void Ledger::RecordObject(std::string_view role, Object object, int64_t bytes,
                          Stage stage) {
  const int o = static_cast<int>(object);
  const double now = impl_->now();
  RecordForward forward;
  {
    absl::MutexLock lock(&impl_->mu);
    const int64_t before = impl_->ObjectBytes(o);
    int64_t& held = impl_->object_bytes[o][std::string(role)];
    const int64_t before_role = held;
    held = bytes;
    const int64_t after = impl_->ObjectBytes(o);
    impl_->object_peak[o] = std::max(impl_->object_peak[o], after);
    impl_->object_seq += 1;
    impl_->history.push_back({std::string(role), o, before_role, bytes, impl_->step, stage});
    if (before > 0 || after > 0) impl_->object_live_seq[o] = impl_->object_seq;
    impl_->SampleProcessMemory(StageName(stage));
    impl_->Write({{"type", "object"},
                  {"step", impl_->step},
                  {"role", role},
                  {"object", ObjectName(object)},
                  {"bytes", bytes},
                  {"stage", StageName(stage)},
                  {"time", now - impl_->t0}});
    forward = impl_->forward;
  }
  if (forward) forward(role, ForwardedObject{object, bytes, stage});
}

void Ledger::ForwardRecords(RecordForward forward) {
  absl::MutexLock lock(&impl_->mu);
  impl_->forward = std::move(forward);
}

Ledger::ObserverId Ledger::AddRecordObserver(RecordObserver observe) {
  absl::MutexLock lock(&impl_->mu);
  const ObserverId id = impl_->next_observer++;
  impl_->observers.emplace_back(id, std::move(observe));
  return id;
}

void Ledger::RemoveRecordObserver(ObserverId id) {
  absl::MutexLock lock(&impl_->mu);
  std::erase_if(impl_->observers, [id](const auto& o) { return o.first == id; });
}

void Ledger::RecordHandoff(std::string_view role,
                           const v1::WeightSyncStats& stats) {
  const double seconds =
      stats.gather_seconds() + stats.transfer_seconds() + stats.load_seconds();
  absl::MutexLock lock(&impl_->mu);
  impl_->cur.handoff_seconds += seconds;
  impl_->cur.handoff_bytes += stats.bytes();
  impl_->handoff_count += 1;
  impl_->handoff_seconds += seconds;
  impl_->handoff_bytes += stats.bytes();
  impl_->Write(
      {{"type", "handoff"},
       {"step", impl_->step},
       {"role", role},
       {"version", stats.version()},
       {"bytes", stats.bytes()},
       {"tensors", stats.tensors()},
       {"buckets", stats.buckets()},
       {"gather_seconds", stats.gather_seconds()},
       {"transfer_seconds", stats.transfer_seconds()},
       {"load_seconds", stats.load_seconds()},
       {"seconds", seconds},
       {"gbps", internal::SafeDiv(static_cast<double>(stats.bytes()), seconds) /
                    1e9}});
}

StepMetrics Ledger::EndStep(const StepCounts& counts) {
  const double now = impl_->now();
  absl::MutexLock lock(&impl_->mu);
  Impl& d = *impl_;
  StepMetrics m;
  m.counts = counts;
  m.stage_seconds = d.cur.stage_seconds;
  m.stage_flops = d.cur.stage_flops;
  m.matmul_peak_flops_per_second = d.matmul_peak;
  m.step_seconds = std::max(0.0, now - d.step_begin);
  m.handoff_seconds = d.cur.handoff_seconds;
  m.handoff_bytes = d.cur.handoff_bytes;
  m.moves = d.cur.moves;
  m.move_bytes = d.cur.move_bytes;
  m.move_seconds = d.cur.move_seconds;
  m.role_busy_seconds = d.cur.role_busy.BusySeconds(d.step_begin, now);
  m.bubble_fraction = internal::BubbleFraction(m.role_busy_seconds, m.step_seconds);
  if (d.step_window != nullptr) {
    m.peak_bytes = d.step_window->peak_bytes();
    d.step_window.reset();
  }
  // Spans already attributed any peak they saw; a higher one was outside.
  d.ObservePeak(m.peak_bytes, kNoStage, d.step_begin_seq);
  internal::DeriveStepMetrics(m);

  d.steps += 1;
  internal::AccumulateCounts(counts, d.count_totals);
  json record = internal::StepMetricsJson(m);
  if (!d.step_device_windows.empty()) {
    record["device_memory"] =
        d.CloseDeviceWindows(d.step_device_windows, "", Stage::kLoad, kNoStage, d.step_begin_seq);
    d.step_device_windows.clear();
  }
  d.SampleProcessMemory(kNoStage);
  record["resident_peak_bytes"] = d.process_memory.TakeStepPeak();
  d.last_step = record;
  record["type"] = "step";
  record["time"] = now - d.t0;
  d.Write(record);

  // Until the next BeginStep, spans accumulate into a step that starts now.
  d.step_begin = now;
  d.step_begin_seq = d.object_seq;
  d.cur = StepAccum{};
  return m;
}

void Ledger::RecordEval(std::string_view label, const EvalMetrics& metrics) {
  absl::MutexLock lock(&impl_->mu);
  impl_->evals[std::string(label)] = metrics;
  json record = internal::EvalMetricsJson(metrics);
  record["type"] = "eval";
  record["step"] = impl_->step;
  record["label"] = label;
  impl_->Write(record);
}

void Ledger::RecordFlops(Stage stage, double flops) {
  absl::MutexLock lock(&impl_->mu);
  impl_->cur.stage_flops[static_cast<int>(stage)] += flops;
  impl_->flops_totals[static_cast<int>(stage)] += flops;
}

void Ledger::RecordMachine(const MachineRecord& machine) {
  absl::MutexLock lock(&impl_->mu);
  impl_->matmul_peak = machine.matmul_peak_flops_per_second;
  json probe = json::object();
  for (const auto& [count, seconds] : machine.thread_probe_seconds) {
    probe[std::to_string(count)] = seconds;
  }
  impl_->Write({{"type", "machine"},
                {"step", impl_->step},
                {"matmul_peak_gflops_per_second", machine.matmul_peak_flops_per_second / 1e9},
                {"threads_given", machine.threads_given},
                {"intra_op_threads", machine.intra_op_threads},
                {"inter_op_threads", machine.inter_op_threads},
                {"blas_threads", machine.blas_threads},
                {"thread_probe_seconds", probe}});
}

void Ledger::RecordVerifier(const v1::VerifierStats& stats) {
  absl::MutexLock lock(&impl_->mu);
  internal::AddVerifierStats(stats, impl_->verifier_totals[stats.verifier()]);
  json record = internal::VerifierStatsJson(stats);
  record["type"] = "verifier";
  record["step"] = impl_->step;
  impl_->Write(record);
}

void Ledger::RecordEnvironment(const v1::EnvironmentStats& stats, double rollout_seconds) {
  absl::MutexLock lock(&impl_->mu);
  const int stage = static_cast<int>(Stage::kEnvironment);
  impl_->cur.stage_seconds[stage] += stats.wait_seconds();
  impl_->stage_totals[stage] += stats.wait_seconds();
  json ended_by = json::object(), errors = json::object();
  for (const auto& [end, n] : stats.ended_by()) ended_by[end] = n;
  for (const auto& [reason, n] : stats.errors_by_reason()) errors[reason] = n;
  impl_->Write(
      {{"type", "environment"},
       {"step", impl_->step},
       {"environment", stats.environment()},
       {"episodes", stats.episodes()},
       {"turns_mean",
        stats.episodes() > 0 ? static_cast<double>(stats.turns()) / stats.episodes() : 0.0},
       {"turns_max", stats.max_turns()},
       {"policy_tokens", stats.policy_tokens()},
       {"environment_tokens", stats.environment_tokens()},
       {"wait_seconds", stats.wait_seconds()},
       {"wait_share", rollout_seconds > 0 ? stats.wait_seconds() / rollout_seconds : 0.0},
       {"unoverlapped_wait_seconds", stats.unoverlapped_wait_seconds()},
       {"ended_by", ended_by},
       {"errors_by_reason", errors},
       {"timeouts", stats.timeouts()}});
}

double Ledger::stage_seconds(Stage stage) const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->stage_totals[static_cast<int>(stage)];
}

double Ledger::stage_flops(Stage stage) const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->flops_totals[static_cast<int>(stage)];
}

double Ledger::matmul_peak_flops_per_second() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->matmul_peak;
}

int64_t Ledger::object_peak_bytes(Object object) const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->object_peak[static_cast<int>(object)];
}

int64_t Ledger::peak_bytes() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->peak;
}

std::vector<PeakAttribution> Ledger::RolePeaks() const {
  absl::MutexLock lock(&impl_->mu);
  std::vector<PeakAttribution> peaks;
  for (const auto& [role, peak] : impl_->role_peaks) peaks.push_back(peak);
  return peaks;
}

std::vector<PeakAttribution> Ledger::DeviceRolePeaks() const {
  absl::MutexLock lock(&impl_->mu);
  std::vector<PeakAttribution> peaks;
  for (const auto& [device, roles] : impl_->device_role_peaks) {
    for (const auto& [role, peak] : roles) peaks.push_back(peak);
  }
  return peaks;
}

}  // namespace trellis::ledger
