// Ledger::WriteSummary: the run's totals as summary.json (schema:
// ledger/README.md); the records themselves are written in ledger.cc.
#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "ledger/internal/ledger_impl.h"
#include "ledger/internal/metrics.h"
#include "ledger/ledger.h"
#include "ledger/memory_tracker.h"

namespace trellis::ledger {

using internal::kNoStage;
using internal::StepAccum;
using nlohmann::json;

absl::Status Ledger::WriteSummary(const std::string& path) const {
  using internal::SafeDiv;
  json j;
  absl::Status write_status;
  {
    absl::MutexLock lock(&impl_->mu);
    const Impl& d = *impl_;
    const auto& t = d.stage_totals;
    const StepCounts& c = d.count_totals;
    const double rollout = t[static_cast<int>(Stage::kRollout)];
    const double update = t[static_cast<int>(Stage::kUpdate)];
    write_status = d.write_status;

    j["steps"] = d.steps;
    j["wall_seconds"] = d.now() - d.t0;
    j["stage_seconds"] = internal::StageSecondsJson(t);
    j["compute"] = internal::ComputeJson(d.flops_totals, t, d.matmul_peak);
    j["rollout_update_ratio"] = SafeDiv(rollout, update);
    j["verifier_wait_seconds"] = t[static_cast<int>(Stage::kVerify)];
    j["effective_sample_rate"] =
        SafeDiv(static_cast<double>(c.samples_effective),
                static_cast<double>(c.samples_generated));
    j["samples"] = {{"generated", c.samples_generated},
                    {"effective", c.samples_effective},
                    {"zero_variance", c.samples_zero_variance},
                    {"truncated", c.samples_truncated},
                    {"unparseable", c.samples_unparseable},
                    {"error", c.samples_error},
                    {"timeout", c.samples_timeout},
                    {"dropped", c.samples_dropped},
                    {"reward_clipped", c.samples_reward_clipped},
                    {"surplus", c.samples_surplus},
                    {"overlong", c.samples_overlong}};
    j["steps_skipped"] = {{"nonfinite", c.steps_skipped_nonfinite}};
    j["dynamic_sampling"] = {{"rounds_extra", c.sampling_rounds_extra},
                             {"prompts_extra", c.prompts_extra},
                             {"seconds_extra", c.sampling_seconds_extra}};
    j["verify_overlap_seconds"] = c.verify_overlap_seconds;
    j["staleness"] = c.staleness;
    j["prompt_account"] = internal::PromptAccountJson(c.prompt_account);
    j["tokens"] = {{"generated", c.generated_tokens},
                   {"trained", c.trained_tokens}};
    j["tokens_per_second"] = {
        {"generated", SafeDiv(static_cast<double>(c.generated_tokens), rollout)},
        {"trained", SafeDiv(static_cast<double>(c.trained_tokens), update)}};
    j["handoff"] = {
        {"count", d.handoff_count},
        {"bytes", d.handoff_bytes},
        {"seconds", d.handoff_seconds},
        {"gbps",
         SafeDiv(static_cast<double>(d.handoff_bytes), d.handoff_seconds) /
             1e9}};
    j["moves"] = internal::MoveTotalsJson(d.moves, d.steps);
    json objects = json::object();
    for (int o = 0; o < kNumObjects; ++o) {
      objects[std::string(ObjectName(static_cast<Object>(o)))] =
          d.object_peak[o];
    }
    json roles = json::object();
    const PeakAttribution* run_peak = nullptr;
    for (const auto& [role, peak] : d.role_peaks) {
      roles[role] = PeakAttributionJson(peak);
      if (run_peak == nullptr || peak.measured_bytes > run_peak->measured_bytes) run_peak = &peak;
    }
    // Each (role, object) of this process: when it was first non-zero, when
    // it last went to zero (null while it is still held), its largest size,
    // and whether it is in the composition of the highest role peak.
    json lifetimes = json::object();
    for (const internal::ObjectEvent& e : d.history) {
      const std::string key = e.role + "/" + std::string(ObjectName(static_cast<Object>(e.object)));
      json& life = lifetimes[key];
      if (life.is_null()) {
        life = {{"created_step", nullptr}, {"created_stage", nullptr}, {"freed_step", nullptr},
                {"freed_stage", nullptr}, {"largest_bytes", 0}, {"live_at_peak", false}};
      }
      if (e.bytes > 0 && life["created_step"].is_null()) {
        life["created_step"] = e.step;
        life["created_stage"] = StageName(e.stage);
      }
      const bool freed = e.bytes == 0 && e.before > 0;
      life["freed_step"] = freed ? json(e.step) : e.bytes > 0 ? json() : life["freed_step"];
      life["freed_stage"] =
          freed ? json(StageName(e.stage)) : e.bytes > 0 ? json() : life["freed_stage"];
      life["largest_bytes"] = std::max(life["largest_bytes"].get<int64_t>(), e.bytes);
    }
    if (run_peak != nullptr) {
      for (const ObjectShare& o : run_peak->objects) {
        const std::string key = o.role + "/" + o.object;
        if (lifetimes.contains(key)) lifetimes[key]["live_at_peak"] = true;
      }
    }
    // Each device added: its roles, run peaks and each role's peak on it.
    json devices = json::object();
    for (const auto& device : d.devices) {
      devices[device->source->name()]["roles"] = device->roles;
    }
    for (const auto& [name, peak] : d.device_peaks) {
      json& out = devices[name];
      out["peak_allocated_bytes"] = peak.allocated_bytes;
      out["peak_reserved_bytes"] = peak.reserved_bytes;
      out["fragmentation_bytes"] = peak.reserved_bytes - peak.allocated_bytes;
      out["peak_stage"] = peak.stage;
      out["role_peaks"] = json::object();
    }
    for (const auto& [name, peaks] : d.device_role_peaks) {
      for (const auto& [role, peak] : peaks) {
        devices[name]["role_peaks"][role] = PeakAttributionJson(peak);
      }
    }
    json process = ProcessMemoryAccountJson(d.process_memory.Account());
    process["stage_peak_resident_bytes"] = d.process_memory.StagePeaks();
    json worker_processes = json::object();
    for (const auto& [role, account] : d.remote_processes) {
      worker_processes[role] = ProcessMemoryAccountJson(account);
    }
    j["memory"] = {{"tracked", MemoryTracker::installed()},
                   {"device", devices},
                   {"peak_bytes", d.peak},
                   {"peak_stage", d.peak_stage},
                   {"objects", objects},
                   {"live_at_peak", d.live_at_peak},
                   {"reserved_equals_allocated", true},
                   {"role_peaks", roles},
                   {"lifetimes", lifetimes},
                   {"process", process},
                   {"worker_processes", worker_processes}};
    json evals = json::object();
    for (const auto& [label, e] : d.evals) evals[label] = internal::EvalMetricsJson(e);
    j["eval"] = evals;
    j["verifiers"] = internal::VerifierTotalsJson(d.verifier_totals);
    j["final_step"] = d.last_step;
  }

  if (absl::Status s = impl_->env->WriteFileAtomically(path, j.dump(2) + "\n"); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("summary: ", s.message()));
  }
  // The summary is complete; still say that ledger.jsonl is not.
  return write_status;
}

}  // namespace trellis::ledger
