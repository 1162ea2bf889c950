// Resuming a run's ledger: the kept prefix of ledger.jsonl and the run
// totals carried in a checkpoint.

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ledger/internal/ledger_impl.h"
#include "ledger/internal/metrics.h"

namespace trellis::ledger {
namespace {

using nlohmann::json;

json CountsJson(const StepCounts& c) {
  StepMetrics m;
  m.counts = c;
  json j = internal::StepMetricsJson(m);
  json out;
  for (const char* key :
       {"step", "policy_version", "prompts", "responses_per_prompt", "samples_generated",
        "samples_effective", "samples_zero_variance", "samples_truncated",
        "samples_unparseable", "samples_error", "samples_timeout", "samples_dropped",
        "samples_reward_clipped", "steps_skipped_nonfinite",
        "generated_tokens", "trained_tokens",
        "mean_reward", "accuracy", "loss", "kl", "clip_fraction", "grad_norm",
        "value_loss", "value_clip_fraction",
        "sampling_rounds_extra", "prompts_extra", "sampling_seconds_extra", "samples_surplus",
        "samples_overlong", "verify_overlap_seconds", "rollout_concurrency", "rollout_actors",
        "recompute_seconds",
        "communication_bytes", "communication_seconds"}) {
    out[key] = j[key];
  }
  out["staleness"] = c.staleness;
  out["prompt_account"] = internal::PromptAccountJson(c.prompt_account);
  return out;
}

// One value per stage, in Stage order; checkpoints written before a stage
// was added have fewer (throws nlohmann::json exceptions).
absl::Status ReadStageArray(const json& j, const std::string& field,
                            std::array<double, kNumStages>& out) {
  const auto values = j.get<std::vector<double>>();
  if (values.size() > static_cast<size_t>(kNumStages)) {
    return absl::DataLossError(absl::StrCat("ledger state: ", field, ": ", values.size(),
                                            " entries, at most ", kNumStages, " expected"));
  }
  std::copy(values.begin(), values.end(), out.begin());
  return absl::OkStatus();
}

StepCounts CountsFromJson(const json& j) {
  StepCounts c;
  c.step = j.at("step").get<int64_t>();
  c.policy_version = j.at("policy_version").get<int64_t>();
  c.prompts = j.at("prompts").get<int64_t>();
  c.responses_per_prompt = j.at("responses_per_prompt").get<int64_t>();
  c.samples_generated = j.at("samples_generated").get<int64_t>();
  c.samples_effective = j.at("samples_effective").get<int64_t>();
  c.samples_zero_variance = j.at("samples_zero_variance").get<int64_t>();
  c.samples_truncated = j.at("samples_truncated").get<int64_t>();
  c.samples_unparseable = j.at("samples_unparseable").get<int64_t>();
  c.samples_error = j.at("samples_error").get<int64_t>();
  // Absent from checkpoints written before they existed.
  c.samples_timeout = j.value("samples_timeout", int64_t{0});
  c.samples_dropped = j.value("samples_dropped", int64_t{0});
  c.samples_reward_clipped = j.value("samples_reward_clipped", int64_t{0});
  c.steps_skipped_nonfinite = j.value("steps_skipped_nonfinite", int64_t{0});
  c.generated_tokens = j.at("generated_tokens").get<int64_t>();
  c.trained_tokens = j.at("trained_tokens").get<int64_t>();
  c.mean_reward = j.at("mean_reward").get<double>();
  c.accuracy = j.at("accuracy").get<double>();
  c.loss = j.at("loss").get<double>();
  c.kl = j.at("kl").get<double>();
  c.clip_fraction = j.at("clip_fraction").get<double>();
  c.grad_norm = j.at("grad_norm").get<double>();
  // Absent from checkpoints written before DAPO's counts existed.
  c.sampling_rounds_extra = j.value("sampling_rounds_extra", int64_t{0});
  c.prompts_extra = j.value("prompts_extra", int64_t{0});
  c.sampling_seconds_extra = j.value("sampling_seconds_extra", 0.0);
  c.samples_surplus = j.value("samples_surplus", int64_t{0});
  c.samples_overlong = j.value("samples_overlong", int64_t{0});
  c.verify_overlap_seconds = j.value("verify_overlap_seconds", 0.0);
  c.rollout_concurrency = j.value("rollout_concurrency", int64_t{0});
  // Absent from checkpoints written before actors could join and leave.
  c.rollout_actors = j.value("rollout_actors", int64_t{0});
  c.value_loss = j.value("value_loss", 0.0);
  c.value_clip_fraction = j.value("value_clip_fraction", 0.0);
  // Absent from checkpoints written before the memory strategies existed.
  c.recompute_seconds = j.value("recompute_seconds", 0.0);
  c.communication_bytes = j.value("communication_bytes", int64_t{0});
  c.communication_seconds = j.value("communication_seconds", 0.0);
  // Absent from checkpoints written before the asynchronous pipeline existed.
  c.staleness = j.value("staleness", std::vector<int64_t>{});
  c.prompt_account = internal::PromptAccountFromJson(j.value("prompt_account", json()));
  return c;
}

}  // namespace

absl::Status Ledger::OpenForResume(const std::string& path, int64_t last_step,
                                   int64_t* dropped) {
  absl::StatusOr<std::string> text = impl_->env->ReadFile(path);
  if (!text.ok()) return internal::InLedger(text.status());
  std::vector<absl::string_view> lines = absl::StrSplit(*text, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  std::string kept;
  int64_t kept_records = 0;
  int64_t removed = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    json record = json::parse(lines[i], nullptr, /*allow_exceptions=*/false);
    const bool valid = record.is_object() && record.contains("step") &&
                       record["step"].is_number_integer();
    if (!valid) {
      // A run killed mid-write leaves a torn last line.
      if (i + 1 == lines.size()) {
        ++removed;
        continue;
      }
      return absl::DataLossError(absl::StrCat(
          path, ":", i + 1, ": expected a JSON record with an integer \"step\""));
    }
    if (record["step"].get<int64_t>() > last_step) {
      ++removed;
      continue;
    }
    absl::StrAppend(&kept, lines[i], "\n");
    ++kept_records;
  }
  if (absl::Status s = impl_->env->WriteFileAtomically(path, kept); !s.ok()) {
    return internal::InLedger(s);
  }
  if (absl::Status s = impl_->OpenFile(path, /*truncate=*/false, kept_records); !s.ok()) return s;
  if (dropped != nullptr) *dropped = removed;
  return absl::OkStatus();
}

std::string Ledger::ExportState() const {
  absl::MutexLock lock(&impl_->mu);
  const Impl& d = *impl_;
  json j;
  j["wall_seconds"] = d.now() - d.t0;
  j["steps"] = d.steps;
  j["stage_seconds"] = d.stage_totals;
  j["stage_flops"] = d.flops_totals;
  j["matmul_peak"] = d.matmul_peak;
  j["counts"] = CountsJson(d.count_totals);
  j["last_step"] = d.last_step;
  j["handoff"] = {{"count", d.handoff_count},
                  {"bytes", d.handoff_bytes},
                  {"seconds", d.handoff_seconds}};
  j["moves"] = internal::MoveTotalsJson(d.moves, d.steps);
  json evals = json::object();
  for (const auto& [label, e] : d.evals) evals[label] = internal::EvalMetricsJson(e);
  j["evals"] = evals;
  j["verifiers"] = internal::VerifierTotalsJson(d.verifier_totals);
  json objects = json::array();
  for (int o = 0; o < kNumObjects; ++o) {
    objects.push_back({{"name", ObjectName(static_cast<Object>(o))},
                       {"peak", d.object_peak[o]},
                       {"bytes", d.object_bytes[o]}});
  }
  json roles = json::array();
  for (const auto& [role, peak] : d.role_peaks) roles.push_back(PeakAttributionJson(peak));
  json device_peaks = json::object();
  for (const auto& [name, peak] : d.device_peaks) {
    device_peaks[name] = {{"allocated_bytes", peak.allocated_bytes},
                          {"reserved_bytes", peak.reserved_bytes},
                          {"stage", peak.stage}};
  }
  for (const auto& [name, peaks] : d.device_role_peaks) {
    for (const auto& [role, peak] : peaks) roles.push_back(PeakAttributionJson(peak));
  }
  j["memory"] = {
      {"peak", d.peak},     {"peak_stage", d.peak_stage}, {"live_at_peak", d.live_at_peak},
      {"objects", objects}, {"role_peaks", roles},        {"device_peaks", device_peaks}};
  return j.dump();
}

absl::Status Ledger::ImportState(const std::string& state) {
  Impl restored(impl_->env);
  std::string field = "(the text)";
  try {
    const json j = json::parse(state);
    field = "wall_seconds";
    const double wall = j.at(field).get<double>();
    field = "steps";
    restored.steps = j.at(field).get<int64_t>();
    field = "stage_seconds";
    if (absl::Status s = ReadStageArray(j.at(field), field, restored.stage_totals); !s.ok()) {
      return s;
    }
    field = "stage_flops";  // absent from checkpoints written before it existed
    if (j.contains(field)) {
      if (absl::Status s = ReadStageArray(j.at(field), field, restored.flops_totals); !s.ok()) {
        return s;
      }
      field = "matmul_peak";
      restored.matmul_peak = j.at(field).get<double>();
    }
    field = "counts";
    restored.count_totals = CountsFromJson(j.at(field));
    field = "last_step";
    restored.last_step = j.at(field);
    field = "handoff";
    restored.handoff_count = j.at(field).at("count").get<int64_t>();
    restored.handoff_bytes = j.at(field).at("bytes").get<int64_t>();
    restored.handoff_seconds = j.at(field).at("seconds").get<double>();
    field = "moves";  // absent from checkpoints written before it existed
    if (j.contains(field)) {
      absl::StatusOr<internal::MoveTotals> moves = internal::MoveTotalsFromJson(j.at(field));
      if (!moves.ok()) return moves.status();
      restored.moves = *std::move(moves);
    }
    field = "evals";
    for (const auto& [label, e] : j.at(field).items()) {
      restored.evals[label] = internal::EvalMetricsFromJson(e);
    }
    field = "verifiers";  // absent from checkpoints written before it existed
    if (j.contains(field)) restored.verifier_totals = internal::VerifierTotalsFromJson(j.at(field));
    field = "memory";
    const json& m = j.at(field);
    restored.peak = m.at("peak").get<int64_t>();
    restored.peak_stage = m.at("peak_stage").get<std::string>();
    restored.live_at_peak = m.at("live_at_peak").get<std::vector<std::string>>();
    // By name: a checkpoint written before an object existed lacks it.
    const json& objects = m.at("objects");
    if (!objects.is_array()) {
      return absl::DataLossError("ledger state: memory.objects: expected an array");
    }
    for (size_t i = 0; i < objects.size(); ++i) {
      field = absl::StrCat("memory.objects[", i, "]");
      const std::string name = objects[i].at("name").get<std::string>();
      const std::optional<Object> object = ObjectFromName(name);
      if (!object.has_value()) {
        return absl::DataLossError(
            absl::StrCat("ledger state: ", field, ": unknown object \"", name, "\""));
      }
      const int o = static_cast<int>(*object);
      restored.object_peak[o] = objects[i].at("peak").get<int64_t>();
      for (const auto& [role, bytes] : objects[i].at("bytes").items()) {
        restored.object_bytes[o][role] = bytes.get<int64_t>();
      }
    }
    field = "memory.role_peaks";  // absent from checkpoints written before it existed
    if (m.contains("role_peaks")) {
      for (const json& peak : m.at("role_peaks")) {
        PeakAttribution p = PeakAttributionFromJson(peak);
        auto& peaks = p.device.empty() ? restored.role_peaks : restored.device_role_peaks[p.device];
        peaks[p.role] = std::move(p);
      }
    }
    field = "memory.device_peaks";  // absent from checkpoints written before it existed
    if (m.contains("device_peaks")) {
      for (const auto& [name, peak] : m.at("device_peaks").items()) {
        restored.device_peaks[name] = {peak.at("allocated_bytes").get<int64_t>(),
                                       peak.at("reserved_bytes").get<int64_t>(),
                                       peak.at("stage").get<std::string>()};
      }
    }
    restored.t0 = impl_->now() - wall;
  } catch (const json::exception& e) {
    return absl::DataLossError(absl::StrCat("ledger state: ", field, ": ", e.what()));
  }
  absl::MutexLock lock(&impl_->mu);
  Impl& d = *impl_;
  d.t0 = restored.t0;
  d.step_begin = d.now();
  d.steps = restored.steps;
  d.stage_totals = restored.stage_totals;
  d.flops_totals = restored.flops_totals;
  d.matmul_peak = restored.matmul_peak;
  d.count_totals = restored.count_totals;
  d.last_step = std::move(restored.last_step);
  d.handoff_count = restored.handoff_count;
  d.handoff_bytes = restored.handoff_bytes;
  d.handoff_seconds = restored.handoff_seconds;
  d.moves = std::move(restored.moves);
  d.evals = std::move(restored.evals);
  d.verifier_totals = std::move(restored.verifier_totals);
  d.peak = restored.peak;
  d.peak_stage = std::move(restored.peak_stage);
  d.live_at_peak = std::move(restored.live_at_peak);
  d.object_bytes = std::move(restored.object_bytes);
  d.object_peak = restored.object_peak;
  d.role_peaks = std::move(restored.role_peaks);
  d.device_peaks = std::move(restored.device_peaks);
  d.device_role_peaks = std::move(restored.device_role_peaks);
  return absl::OkStatus();
}

}  // namespace trellis::ledger
