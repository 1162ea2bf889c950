#include "ledger/internal/metrics.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

namespace trellis::ledger::internal {

double SafeDiv(double a, double b) { return b > 0 ? a / b : 0.0; }

void DeriveStepMetrics(StepMetrics& m) {
  const double rollout = m.stage_seconds[static_cast<int>(Stage::kRollout)];
  const double update = m.stage_seconds[static_cast<int>(Stage::kUpdate)];
  m.rollout_update_ratio = SafeDiv(rollout, update);
  m.verifier_wait_seconds = m.stage_seconds[static_cast<int>(Stage::kVerify)];
  m.effective_sample_rate = SafeDiv(static_cast<double>(m.counts.samples_effective),
                                    static_cast<double>(m.counts.samples_generated));
  m.generated_tokens_per_second =
      SafeDiv(static_cast<double>(m.counts.generated_tokens), rollout);
  m.trained_tokens_per_second = SafeDiv(static_cast<double>(m.counts.trained_tokens), update);
}

nlohmann::json StageSecondsJson(const std::array<double, kNumStages>& s) {
  nlohmann::json j = nlohmann::json::object();
  for (int i = 0; i < kNumStages; ++i) {
    j[std::string(StageName(static_cast<Stage>(i)))] = s[i];
  }
  return j;
}

nlohmann::json ComputeJson(const std::array<double, kNumStages>& flops,
                           const std::array<double, kNumStages>& seconds, double peak) {
  nlohmann::json stages = nlohmann::json::object();
  for (int i = 0; i < kNumStages; ++i) {
    if (flops[i] <= 0) continue;
    const double rate = SafeDiv(flops[i], seconds[i]);
    stages[std::string(StageName(static_cast<Stage>(i)))] = {
        {"flops", flops[i]},
        {"gflops_per_second", rate / 1e9},
        {"peak_fraction", SafeDiv(rate, peak)}};
  }
  return {{"matmul_peak_gflops_per_second", peak / 1e9}, {"stages", stages}};
}

nlohmann::json PromptAccountJson(const PromptAccount& a) {
  return {{"drawn", a.drawn},
          {"trained", a.trained},
          {"dropped", a.dropped},
          {"in_flight", a.in_flight},
          {"reconciles", a.Reconciles()}};
}

PromptAccount PromptAccountFromJson(const nlohmann::json& j) {
  PromptAccount a;
  if (!j.is_object()) return a;
  a.drawn = j.value("drawn", int64_t{0});
  a.trained = j.value("trained", int64_t{0});
  a.in_flight = j.value("in_flight", int64_t{0});
  if (j.contains("dropped")) a.dropped = j.at("dropped").get<std::map<std::string, int64_t>>();
  return a;
}

nlohmann::json StepMetricsJson(const StepMetrics& m) {
  const StepCounts& c = m.counts;
  return {
      {"step", c.step},
      {"policy_version", c.policy_version},
      {"prompts", c.prompts},
      {"responses_per_prompt", c.responses_per_prompt},
      {"samples_generated", c.samples_generated},
      {"samples_effective", c.samples_effective},
      {"samples_zero_variance", c.samples_zero_variance},
      {"samples_truncated", c.samples_truncated},
      {"samples_unparseable", c.samples_unparseable},
      {"samples_error", c.samples_error},
      {"samples_timeout", c.samples_timeout},
      {"samples_dropped", c.samples_dropped},
      {"samples_reward_clipped", c.samples_reward_clipped},
      {"generated_tokens", c.generated_tokens},
      {"trained_tokens", c.trained_tokens},
      {"mean_reward", c.mean_reward},
      {"accuracy", c.accuracy},
      {"loss", c.loss},
      {"kl", c.kl},
      {"clip_fraction", c.clip_fraction},
      {"grad_norm", c.grad_norm},
      {"steps_skipped_nonfinite", c.steps_skipped_nonfinite},
      {"value_loss", c.value_loss},
      {"value_clip_fraction", c.value_clip_fraction},
      {"stage_seconds", StageSecondsJson(m.stage_seconds)},
      {"compute", ComputeJson(m.stage_flops, m.stage_seconds, m.matmul_peak_flops_per_second)},
      {"step_seconds", m.step_seconds},
      {"rollout_update_ratio", m.rollout_update_ratio},
      {"verifier_wait_seconds", m.verifier_wait_seconds},
      {"effective_sample_rate", m.effective_sample_rate},
      {"generated_tokens_per_second", m.generated_tokens_per_second},
      {"trained_tokens_per_second", m.trained_tokens_per_second},
      {"handoff_seconds", m.handoff_seconds},
      {"handoff_bytes", m.handoff_bytes},
      {"moves", m.moves},
      {"move_bytes", m.move_bytes},
      {"move_seconds", m.move_seconds},
      {"peak_bytes", m.peak_bytes},
      {"role_busy_seconds", m.role_busy_seconds},
      {"bubble_fraction", m.bubble_fraction},
      {"sampling_rounds_extra", c.sampling_rounds_extra},
      {"prompts_extra", c.prompts_extra},
      {"sampling_seconds_extra", c.sampling_seconds_extra},
      {"samples_surplus", c.samples_surplus},
      {"samples_overlong", c.samples_overlong},
      {"verify_overlap_seconds", c.verify_overlap_seconds},
      {"rollout_concurrency", c.rollout_concurrency},
      {"rollout_actors", c.rollout_actors},
      {"reward_margin", c.reward_margin},
      {"preference_accuracy", c.preference_accuracy},
      {"recompute_seconds", c.recompute_seconds},
      {"communication_bytes", c.communication_bytes},
      {"communication_seconds", c.communication_seconds},
      {"staleness", c.staleness},
      {"logprob_gap", c.logprob_gap},
      {"importance_weight_truncated", c.importance_weight_truncated},
      {"token_staleness", c.token_staleness},
      {"rollout_groups_carried", c.rollout_groups_carried},
      {"rollout_groups_restarted", c.rollout_groups_restarted},
      {"rollout_tokens_discarded", c.rollout_tokens_discarded},
      {"router_aux_loss", c.router_aux_loss},
      {"routing_mismatch", c.routing_mismatch},
      {"routing_record_bytes", c.routing_record_bytes},
      {"logprob_gap_replayed", c.logprob_gap_replayed},
      {"logprob_gap_own_routing", c.logprob_gap_own_routing},
      {"teacher_divergence", c.teacher_divergence},
      {"prompt_ids", c.prompt_ids},
      {"prompt_account", PromptAccountJson(c.prompt_account)},
  };
}

nlohmann::json EvalMetricsJson(const EvalMetrics& e) {
  nlohmann::json j = {
      {"prompts", e.prompts}, {"accuracy", e.accuracy}, {"mean_reward", e.mean_reward}};
  if (e.loss.has_value()) j["loss"] = *e.loss;
  if (e.reward_margin.has_value()) j["reward_margin"] = *e.reward_margin;
  if (e.unscored.has_value()) {
    j["complete"] = *e.unscored == 0;
    j["unscored"] = *e.unscored;
    j["verify_retries"] = e.verify_retries;
    // An incomplete evaluation has no accuracy: its scored items are not
    // the held-out set.
    if (*e.unscored > 0) j["accuracy"] = j["mean_reward"] = nullptr;
  }
  return j;
}

EvalMetrics EvalMetricsFromJson(const nlohmann::json& j) {
  EvalMetrics e;
  e.prompts = j.at("prompts").get<int64_t>();
  e.accuracy = j.at("accuracy").is_null() ? 0 : j.at("accuracy").get<double>();
  e.mean_reward = j.at("mean_reward").is_null() ? 0 : j.at("mean_reward").get<double>();
  if (j.contains("loss")) e.loss = j.at("loss").get<double>();
  if (j.contains("reward_margin")) e.reward_margin = j.at("reward_margin").get<double>();
  if (j.contains("unscored")) {
    e.unscored = j.at("unscored").get<int64_t>();
    e.verify_retries = j.at("verify_retries").get<int64_t>();
  }
  return e;
}

void AccumulateCounts(const StepCounts& step, StepCounts& total) {
  total.step = step.step;
  total.policy_version = step.policy_version;
  total.responses_per_prompt = step.responses_per_prompt;
  total.prompts += step.prompts;
  total.samples_generated += step.samples_generated;
  total.samples_effective += step.samples_effective;
  total.samples_zero_variance += step.samples_zero_variance;
  total.samples_truncated += step.samples_truncated;
  total.samples_unparseable += step.samples_unparseable;
  total.samples_error += step.samples_error;
  total.samples_timeout += step.samples_timeout;
  total.samples_dropped += step.samples_dropped;
  total.samples_reward_clipped += step.samples_reward_clipped;
  total.steps_skipped_nonfinite += step.steps_skipped_nonfinite;
  total.generated_tokens += step.generated_tokens;
  total.trained_tokens += step.trained_tokens;
  total.sampling_rounds_extra += step.sampling_rounds_extra;
  total.prompts_extra += step.prompts_extra;
  total.sampling_seconds_extra += step.sampling_seconds_extra;
  total.samples_surplus += step.samples_surplus;
  total.samples_overlong += step.samples_overlong;
  total.verify_overlap_seconds += step.verify_overlap_seconds;
  if (total.staleness.size() < step.staleness.size()) total.staleness.resize(step.staleness.size());
  for (size_t k = 0; k < step.staleness.size(); ++k) total.staleness[k] += step.staleness[k];
  total.prompt_account = step.prompt_account;
}

nlohmann::json VerifierStatsJson(const v1::VerifierStats& s) {
  nlohmann::json j = {
      {"verifier", s.verifier()},
      {"items", s.items()},
      {"cache_hits", s.cache_hits()},
      {"timeouts", s.timeouts()},
      {"errors", s.errors()},
      {"retries", s.retries()},
      {"breaker_openings", s.breaker_openings()},
      {"breaker_rejected", s.breaker_rejected()},
      {"dropped", s.dropped()},
      {"calls", s.calls()},
      {"wait_seconds", s.wait_seconds()},
      {"latency_p50_seconds", s.latency_p50_seconds()},
      {"latency_p99_seconds", s.latency_p99_seconds()},
  };
  j["errors_by_reason"] = nlohmann::json::object();
  for (const auto& [reason, n] : s.errors_by_reason()) j["errors_by_reason"][reason] = n;
  j["timeouts_by_reason"] = nlohmann::json::object();
  for (const auto& [reason, n] : s.timeouts_by_reason()) j["timeouts_by_reason"][reason] = n;
  j["reported"] = std::vector<std::string>(s.reported().begin(), s.reported().end());
  return j;
}

void AddVerifierStats(const v1::VerifierStats& s, v1::VerifierStats& total) {
  total.set_verifier(s.verifier());
  total.set_items(total.items() + s.items());
  total.set_cache_hits(total.cache_hits() + s.cache_hits());
  total.set_timeouts(total.timeouts() + s.timeouts());
  total.set_errors(total.errors() + s.errors());
  total.set_retries(total.retries() + s.retries());
  total.set_breaker_openings(total.breaker_openings() + s.breaker_openings());
  total.set_breaker_rejected(total.breaker_rejected() + s.breaker_rejected());
  total.set_dropped(total.dropped() + s.dropped());
  total.set_calls(total.calls() + s.calls());
  total.set_wait_seconds(total.wait_seconds() + s.wait_seconds());
  total.set_latency_p99_seconds(std::max(total.latency_p99_seconds(), s.latency_p99_seconds()));
  for (const auto& [reason, n] : s.errors_by_reason()) {
    (*total.mutable_errors_by_reason())[reason] += n;
  }
  for (const auto& [reason, n] : s.timeouts_by_reason()) {
    (*total.mutable_timeouts_by_reason())[reason] += n;
  }
  std::set<std::string> reported(total.reported().begin(), total.reported().end());
  reported.insert(s.reported().begin(), s.reported().end());
  total.clear_reported();
  for (const std::string& name : reported) total.add_reported(name);
}

nlohmann::json VerifierTotalsJson(const std::map<std::string, v1::VerifierStats>& totals) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, t] : totals) {
    nlohmann::json j = VerifierStatsJson(t);
    j.erase("verifier");
    j.erase("latency_p50_seconds");
    j.erase("latency_p99_seconds");
    j["latency_p99_seconds_max"] = t.latency_p99_seconds();
    out[name] = std::move(j);
  }
  return out;
}

std::map<std::string, v1::VerifierStats> VerifierTotalsFromJson(const nlohmann::json& j) {
  std::map<std::string, v1::VerifierStats> out;
  for (const auto& [name, t] : j.items()) {
    v1::VerifierStats& s = out[name];
    s.set_verifier(name);
    s.set_items(t.at("items").get<int64_t>());
    s.set_cache_hits(t.at("cache_hits").get<int64_t>());
    s.set_timeouts(t.at("timeouts").get<int64_t>());
    s.set_errors(t.at("errors").get<int64_t>());
    s.set_retries(t.at("retries").get<int64_t>());
    s.set_breaker_openings(t.at("breaker_openings").get<int64_t>());
    s.set_breaker_rejected(t.at("breaker_rejected").get<int64_t>());
    s.set_dropped(t.at("dropped").get<int64_t>());
    s.set_calls(t.at("calls").get<int64_t>());
    s.set_wait_seconds(t.at("wait_seconds").get<double>());
    s.set_latency_p99_seconds(t.at("latency_p99_seconds_max").get<double>());
    // Absent from checkpoints written before they existed.
    const nlohmann::json errors = t.value("errors_by_reason", nlohmann::json::object());
    for (const auto& [reason, count] : errors.items()) {
      (*s.mutable_errors_by_reason())[reason] = count.get<int64_t>();
    }
    const nlohmann::json timeouts = t.value("timeouts_by_reason", nlohmann::json::object());
    for (const auto& [reason, count] : timeouts.items()) {
      (*s.mutable_timeouts_by_reason())[reason] = count.get<int64_t>();
    }
    const nlohmann::json reported = t.value("reported", nlohmann::json::array());
    for (const auto& name : reported) s.add_reported(name.get<std::string>());
  }
  return out;
}

}  // namespace trellis::ledger::internal
