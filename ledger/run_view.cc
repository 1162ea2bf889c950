#include "ledger/run_view.h"

#include <algorithm>
#include <array>
#include <deque>
#include <fstream>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "ledger/internal/record_json.h"
#include "ledger/ledger.h"

namespace trellis::ledger {
namespace {

using internal::Int;
using internal::Num;
using internal::Str;
using nlohmann::json;

// Seconds from 1 ms to about 9 minutes, doubling.
std::vector<double> SecondsBuckets() { return ExponentialBuckets(0.001, 2, 20); }

// Step-record fields kept in the step table (the rest stay in ledger.jsonl).
// clang-format off
constexpr const char* kStepFields[] = {
    "step", "time", "policy_version", "step_seconds", "mean_reward", "accuracy", "loss", "kl",
    "effective_sample_rate", "rollout_update_ratio", "verifier_wait_seconds",
    "generated_tokens_per_second", "trained_tokens_per_second", "handoff_seconds", "handoff_bytes",
    "move_bytes", "move_seconds", "peak_bytes", "device_memory", "samples_generated",
    "samples_effective", "stage_seconds", "role_busy_seconds", "bubble_fraction",
    "rollout_concurrency", "rollout_actors"};
// clang-format on

// samples_lost_total{reason}: the step record's loss counts (each sample
// counted once; surplus samples are left out by dynamic sampling).
constexpr std::pair<const char*, const char*> kLossReasons[] = {
    {"zero_variance", "samples_zero_variance"}, {"truncated", "samples_truncated"},
    {"unparseable", "samples_unparseable"},     {"error", "samples_error"},
    {"timeout", "samples_timeout"},             {"dropped", "samples_dropped"},
    {"surplus", "samples_surplus"}};

constexpr const char* kPhases[] = {"gather", "transfer", "load"};

// trellis_device_memory_peak_bytes{kind}: each field of the step's device_memory.
constexpr std::pair<const char*, const char*> kDeviceKinds[] = {
    {"allocated", "peak_allocated_bytes"},
    {"reserved", "peak_reserved_bytes"},
    {"fragmentation", "fragmentation_bytes"}};

// Index of `name` in `names`, appended when new.
int Intern(std::vector<std::string>& names, const std::string& name) {
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<int>(i);
  }
  names.push_back(name);
  return static_cast<int>(names.size() - 1);
}

}  // namespace

struct RunView::State {
  mutable absl::Mutex mu;
  int64_t records ABSL_GUARDED_BY(mu) = 0;
  int64_t current_step ABSL_GUARDED_BY(mu) = -1;
  double time ABSL_GUARDED_BY(mu) = 0;

  std::vector<json> steps ABSL_GUARDED_BY(mu);
  json last_step ABSL_GUARDED_BY(mu);  // Null before the first.
  std::vector<json> evals ABSL_GUARDED_BY(mu);

  // Timeline: [start, seconds, stage index, role index, step].
  std::vector<std::string> stages ABSL_GUARDED_BY(mu);
  std::vector<std::string> roles ABSL_GUARDED_BY(mu);
  std::deque<std::array<double, 5>> spans ABSL_GUARDED_BY(mu);
  int64_t spans_dropped ABSL_GUARDED_BY(mu) = 0;
  std::map<std::pair<std::string, std::string>, Histogram> stage_hist ABSL_GUARDED_BY(mu);
  std::map<std::string, double> stage_totals ABSL_GUARDED_BY(mu);

  // Memory: latest and peak bytes by (role, object); per object totals over
  // time as [time, step, bytes of each of kNumObjects objects].
  std::map<std::pair<std::string, std::string>, std::pair<int64_t, int64_t>> memory
      ABSL_GUARDED_BY(mu);
  std::array<int64_t, kNumObjects> object_totals ABSL_GUARDED_BY(mu){};
  std::array<int64_t, kNumObjects> object_peaks ABSL_GUARDED_BY(mu){};
  std::vector<std::vector<double>> memory_series ABSL_GUARDED_BY(mu);

  // Handoffs: [time, step, bytes, gather, transfer, load] and histograms.
  std::vector<json> handoffs ABSL_GUARDED_BY(mu);
  std::array<Histogram, 3> handoff_hist ABSL_GUARDED_BY(mu){
      Histogram(SecondsBuckets()), Histogram(SecondsBuckets()), Histogram(SecondsBuckets())};
  int64_t handoff_bytes ABSL_GUARDED_BY(mu) = 0;

  std::map<std::string, Histogram> verifier_hist ABSL_GUARDED_BY(mu);
  Histogram step_hist ABSL_GUARDED_BY(mu){SecondsBuckets()};
  std::map<std::string, int64_t> sample_totals ABSL_GUARDED_BY(mu);
  int64_t generated_tokens ABSL_GUARDED_BY(mu) = 0;
  int64_t trained_tokens ABSL_GUARDED_BY(mu) = 0;

  void AddSpan(const json& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const std::string stage = Str(r, "stage");
    const std::string role = Str(r, "role");
    const double start = Num(r, "start");
    const double seconds = Num(r, "seconds");
    time = std::max(time, start + seconds);
    spans.push_back({start, seconds, static_cast<double>(Intern(stages, stage)),
                     static_cast<double>(Intern(roles, role)),
                     static_cast<double>(Int(r, "step"))});
    if (spans.size() > static_cast<size_t>(kMaxSpans)) {
      spans.pop_front();
      ++spans_dropped;
    }
    stage_hist.try_emplace({stage, role}, SecondsBuckets()).first->second.Observe(seconds);
    stage_totals[stage] += seconds;
  }

  void AddObject(const json& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const std::optional<Object> object = ObjectFromName(Str(r, "object"));
    if (!object.has_value()) return;
    const int o = static_cast<int>(*object);
    const std::string role = Str(r, "role");
    const int64_t bytes = Int(r, "bytes");
    if (r.contains("time")) time = std::max(time, Num(r, "time"));
    auto& [now, peak] = memory[{role, Str(r, "object")}];
    object_totals[o] += bytes - now;
    now = bytes;
    peak = std::max(peak, bytes);
    object_peaks[o] = std::max(object_peaks[o], object_totals[o]);
    std::vector<double> point = {time, static_cast<double>(current_step)};
    for (int64_t total : object_totals) point.push_back(static_cast<double>(total));
    memory_series.push_back(std::move(point));
    if (memory_series.size() > static_cast<size_t>(kMaxMemoryPoints)) {
      // Thin the older points: drop every second one, keep the newest.
      std::vector<std::vector<double>> kept;
      for (size_t i = 0; i < memory_series.size(); ++i) {
        if (i % 2 == 0 || i + 1 == memory_series.size()) kept.push_back(memory_series[i]);
      }
      memory_series = std::move(kept);
    }
  }

  void AddStep(const json& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    json row = json::object();
    for (const char* field : kStepFields) {
      if (r.contains(field)) row[field] = r[field];
    }
    if (r.contains("time")) time = std::max(time, Num(r, "time"));
    steps.push_back(row);
    last_step = r;
    step_hist.Observe(Num(r, "step_seconds"));
    sample_totals["generated"] += Int(r, "samples_generated");
    sample_totals["effective"] += Int(r, "samples_effective");
    for (const auto& [reason, field] : kLossReasons) sample_totals[reason] += Int(r, field);
    generated_tokens += Int(r, "generated_tokens");
    trained_tokens += Int(r, "trained_tokens");
  }

  // trellis_stage_seconds, trellis_memory_bytes, trellis_memory_peak_bytes.
  void WriteStageAndMemory(PrometheusText& out) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    using Type = PrometheusText::Type;
    out.Family("trellis_stage_seconds", Type::kHistogram,
               "Seconds of each span: one stage of one role (ledger span records).");
    for (const auto& [key, h] : stage_hist) {
      out.HistogramSeries("trellis_stage_seconds", {{"stage", key.first}, {"role", key.second}},
                          h);
    }
    out.Family("trellis_memory_bytes", Type::kGauge,
               "Bytes of a resident object a role holds now (ledger object records).");
    for (const auto& [key, bytes] : memory) {
      out.Sample("trellis_memory_bytes", {{"role", key.first}, {"object", key.second}},
                 static_cast<double>(bytes.first));
    }
    out.Family("trellis_memory_peak_bytes", Type::kGauge,
               "Highest bytes of a resident object a role held.");
    for (const auto& [key, bytes] : memory) {
      out.Sample("trellis_memory_peak_bytes", {{"role", key.first}, {"object", key.second}},
                 static_cast<double>(bytes.second));
    }
  }

  void AddHandoff(const json& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const double phases[3] = {Num(r, "gather_seconds"), Num(r, "transfer_seconds"),
                              Num(r, "load_seconds")};
    for (int i = 0; i < 3; ++i) handoff_hist[i].Observe(phases[i]);
    handoff_bytes += Int(r, "bytes");
    handoffs.push_back({{"step", Int(r, "step")},
                        {"role", Str(r, "role")},
                        {"bytes", Int(r, "bytes")},
                        {"gather_seconds", phases[0]},
                        {"transfer_seconds", phases[1]},
                        {"load_seconds", phases[2]}});
    if (handoffs.size() > static_cast<size_t>(kMaxSpans)) handoffs.erase(handoffs.begin());
  }
};

RunView::RunView() : state_(std::make_unique<State>()) {}
RunView::~RunView() = default;

absl::Status RunView::Add(std::string_view record) {
  absl::StatusOr<json> parsed = internal::ParseRecord(record);
  if (!parsed.ok()) return parsed.status();
  json& r = *parsed;
  State& s = *state_;
  absl::MutexLock lock(&s.mu);
  ++s.records;
  if (r.contains("step") && r["step"].is_number_integer()) s.current_step = Int(r, "step");
  const std::string type = r["type"].get<std::string>();
  if (type == "span") {
    s.AddSpan(r);
  } else if (type == "object") {
    s.AddObject(r);
  } else if (type == "step") {
    s.AddStep(r);
  } else if (type == "handoff") {
    s.AddHandoff(r);
  } else if (type == "verifier") {
    s.verifier_hist.try_emplace(Str(r, "verifier"), SecondsBuckets())
        .first->second.Observe(Num(r, "wait_seconds"));
  } else if (type == "eval") {
    r.erase("type");
    s.evals.push_back(std::move(r));
  }
  return absl::OkStatus();
}

absl::Status RunView::AddFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    if (absl::Status s = Add(line); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", n, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

int64_t RunView::current_step() const {
  absl::MutexLock lock(&state_->mu);
  return state_->current_step;
}

std::string RunView::ViewJson() const {
  const State& s = *state_;
  absl::MutexLock lock(&s.mu);
  json v;
  v["current_step"] = s.current_step;
  v["steps_done"] = s.steps.size();
  v["time"] = s.time;
  v["records"] = s.records;
  v["steps"] = s.steps;
  v["evals"] = s.evals;
  v["stages"] = s.stages;
  v["roles"] = s.roles;
  v["spans"] = s.spans;
  v["spans_dropped"] = s.spans_dropped;
  v["stage_totals"] = s.stage_totals;
  json objects = json::array();
  for (int o = 0; o < kNumObjects; ++o) objects.push_back(ObjectName(static_cast<Object>(o)));
  v["memory"] = {{"objects", objects},
                 {"series", s.memory_series},
                 {"peak_bytes", s.object_peaks},
                 {"current_bytes", s.object_totals}};
  json by_role = json::array();
  for (const auto& [key, bytes] : s.memory) {
    by_role.push_back({{"role", key.first},
                       {"object", key.second},
                       {"bytes", bytes.first},
                       {"peak_bytes", bytes.second}});
  }
  v["memory"]["by_role"] = std::move(by_role);
  v["handoffs"] = s.handoffs;
  json verifiers = json::object();
  for (const auto& [name, h] : s.verifier_hist) {
    verifiers[name] = {{"requests", h.count()}, {"wait_seconds", h.sum()}};
  }
  v["verifiers"] = std::move(verifiers);
  v["samples"] = s.sample_totals;
  return v.dump();
}

void RunView::WriteMetrics(PrometheusText& out, Scope scope) const {
  using Type = PrometheusText::Type;
  const State& s = *state_;
  absl::MutexLock lock(&s.mu);
  s.WriteStageAndMemory(out);
  out.Family("trellis_ledger_records_total", Type::kCounter, "Ledger records seen.");
  out.Sample("trellis_ledger_records_total", {}, static_cast<double>(s.records));
  if (scope == Scope::kProcess) return;
  const json& last = s.last_step;
  const bool has_step = last.is_object();

  out.Family("trellis_step", Type::kGauge, "Step of the newest ledger record (-1: set-up).");
  out.Sample("trellis_step", {}, static_cast<double>(s.current_step));
  out.Family("trellis_steps_total", Type::kCounter, "Training steps completed.");
  out.Sample("trellis_steps_total", {}, static_cast<double>(s.steps.size()));
  out.Family("trellis_step_seconds", Type::kHistogram, "Wall seconds of each training step.");
  out.HistogramSeries("trellis_step_seconds", {}, s.step_hist);

  out.Family("trellis_rollout_update_ratio", Type::kGauge,
             "Rollout seconds / update seconds of the last step.");
  out.Sample("trellis_rollout_update_ratio", {}, has_step ? Num(last, "rollout_update_ratio") : 0);
  out.Family("trellis_rollout_actors", Type::kGauge,
             "Actors that answered the last step's rollout (a pool's members change between steps).");
  out.Sample("trellis_rollout_actors", {}, has_step ? Num(last, "rollout_actors") : 0);
  out.Family("trellis_bubble_fraction", Type::kGauge,
             "Share of the roles' time in the last step that none of their stages covered.");
  out.Sample("trellis_bubble_fraction", {}, has_step ? Num(last, "bubble_fraction") : 0);
  out.Family("trellis_device_memory_peak_bytes", Type::kGauge,
             "Each device's peak allocated and reserved bytes in the last step, and their "
             "difference (fragmentation).");
  if (has_step && last.contains("device_memory")) {
    for (const auto& device : last["device_memory"].items()) {
      for (const auto& [kind, field] : kDeviceKinds) {
        out.Sample("trellis_device_memory_peak_bytes", {{"device", device.key()}, {"kind", kind}},
                   Num(device.value(), field));
      }
    }
  }
  out.Family("trellis_role_busy_fraction", Type::kGauge,
             "Each role's busy seconds / step seconds, last step.");
  if (has_step && last.contains("role_busy_seconds")) {
    const double step_seconds = Num(last, "step_seconds");
    for (const auto& busy : last["role_busy_seconds"].items()) {
      out.Sample("trellis_role_busy_fraction", {{"role", busy.key()}},
                 step_seconds > 0 ? busy.value().get<double>() / step_seconds : 0);
    }
  }
  out.Family("trellis_verifier_wait_seconds", Type::kHistogram,
             "Wall seconds each verifier took to answer a request.");
  for (const auto& [name, h] : s.verifier_hist) {
    out.HistogramSeries("trellis_verifier_wait_seconds", {{"verifier", name}}, h);
  }
  out.Family("trellis_effective_sample_rate", Type::kGauge,
             "Samples that carried gradient / samples generated, last step.");
  out.Sample("trellis_effective_sample_rate", {},
             has_step ? Num(last, "effective_sample_rate") : 0);
  auto total = [&s](const char* key) {
    auto it = s.sample_totals.find(key);
    return it == s.sample_totals.end() ? 0.0 : static_cast<double>(it->second);
  };
  out.Family("trellis_samples_generated_total", Type::kCounter, "Samples generated.");
  out.Sample("trellis_samples_generated_total", {}, total("generated"));
  out.Family("trellis_samples_effective_total", Type::kCounter,
             "Samples with a non-zero advantage (they carried gradient).");
  out.Sample("trellis_samples_effective_total", {}, total("effective"));
  out.Family("trellis_samples_lost_total", Type::kCounter,
             "Samples that carried no gradient, by reason (each counted once).");
  for (const auto& [reason, field] : kLossReasons) {
    out.Sample("trellis_samples_lost_total", {{"reason", reason}}, total(reason));
  }
  out.Family("trellis_handoff_seconds", Type::kHistogram,
             "Seconds of each weight handoff, by phase.");
  for (int i = 0; i < 3; ++i) {
    out.HistogramSeries("trellis_handoff_seconds", {{"phase", kPhases[i]}}, s.handoff_hist[i]);
  }
  out.Family("trellis_handoff_bytes_total", Type::kCounter, "Bytes of weights handed off.");
  out.Sample("trellis_handoff_bytes_total", {}, static_cast<double>(s.handoff_bytes));

  out.Family("trellis_tokens_per_second", Type::kGauge,
             "Last step: generated tokens / rollout s, trained tokens / update s.");
  out.Sample("trellis_tokens_per_second", {{"kind", "generated"}},
             has_step ? Num(last, "generated_tokens_per_second") : 0);
  out.Sample("trellis_tokens_per_second", {{"kind", "trained"}},
             has_step ? Num(last, "trained_tokens_per_second") : 0);
  out.Family("trellis_tokens_total", Type::kCounter, "Tokens generated and trained.");
  out.Sample("trellis_tokens_total", {{"kind", "generated"}},
             static_cast<double>(s.generated_tokens));
  out.Sample("trellis_tokens_total", {{"kind", "trained"}}, static_cast<double>(s.trained_tokens));
  out.Family("trellis_rollout_concurrency", Type::kGauge,
             "Last step's decode batch bound, summed over the actors (0: none).");
  out.Sample("trellis_rollout_concurrency", {}, has_step ? Num(last, "rollout_concurrency") : 0);
  out.Family("trellis_mean_reward", Type::kGauge, "Mean reward of the last step's samples.");
  out.Sample("trellis_mean_reward", {}, has_step ? Num(last, "mean_reward") : 0);
  out.Family("trellis_eval_accuracy", Type::kGauge, "Held-out accuracy of each complete eval.");
  std::map<std::string, double> evals;
  for (const json& e : s.evals) {
    if (e.value("complete", true)) evals[Str(e, "label")] = Num(e, "accuracy");
  }
  for (const auto& [label, accuracy] : evals) {
    out.Sample("trellis_eval_accuracy", {{"label", label}}, accuracy);
  }
}

}  // namespace trellis::ledger
