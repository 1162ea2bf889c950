#include "ledger/internal/metrics.h"

#include <string>

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
      {"generated_tokens", c.generated_tokens},
      {"trained_tokens", c.trained_tokens},
      {"mean_reward", c.mean_reward},
      {"accuracy", c.accuracy},
      {"loss", c.loss},
      {"kl", c.kl},
      {"clip_fraction", c.clip_fraction},
      {"grad_norm", c.grad_norm},
      {"stage_seconds", StageSecondsJson(m.stage_seconds)},
      {"step_seconds", m.step_seconds},
      {"rollout_update_ratio", m.rollout_update_ratio},
      {"verifier_wait_seconds", m.verifier_wait_seconds},
      {"effective_sample_rate", m.effective_sample_rate},
      {"generated_tokens_per_second", m.generated_tokens_per_second},
      {"trained_tokens_per_second", m.trained_tokens_per_second},
      {"handoff_seconds", m.handoff_seconds},
      {"handoff_bytes", m.handoff_bytes},
      {"peak_bytes", m.peak_bytes},
  };
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
  total.generated_tokens += step.generated_tokens;
  total.trained_tokens += step.trained_tokens;
}

}  // namespace trellis::ledger::internal
