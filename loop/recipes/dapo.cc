#include "loop/recipes/dapo.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "loop/batch.h"
#include "loop/dynamic_sampling.h"
#include "loop/loop_util.h"

namespace trellis::loop {

absl::StatusOr<RewardSummary> SampleUsefulGroups(Driver& driver, int64_t step, StepSamples* drawn,
                                                 ledger::StepCounts& counts) {
  const v1::GrpoConfig& grpo = driver.job().grpo();
  const int64_t group = grpo.responses_per_prompt();
  const int64_t want = grpo.prompts_per_step();
  auto rewards_of = [&] {
    std::vector<float> rewards;
    for (const auto& r : drawn->verdicts.results()) rewards.push_back(r.reward());
    return rewards;
  };
  std::vector<bool> useful = UsefulGroups(rewards_of(), group);
  for (int round = 1; round < grpo.dapo().max_sampling_rounds(); ++round) {
    const int64_t have = std::count(useful.begin(), useful.end(), true);
    const int64_t prompts = NextRoundPrompts(want, have, static_cast<int64_t>(useful.size()));
    if (prompts == 0) break;
    double seconds = 0;
    if (absl::Status s = driver.SampleRound(step, round, prompts, group, drawn, &seconds);
        !s.ok()) {
      return At(s, absl::StrCat("dynamic sampling round ", round));
    }
    ++counts.sampling_rounds_extra;
    counts.prompts_extra += prompts;
    counts.sampling_seconds_extra += seconds;
    useful = UsefulGroups(rewards_of(), group);
  }
  counts.samples_generated = drawn->rollout.samples_size();
  counts.generated_tokens = drawn->rollout.generated_tokens();
  counts.samples_reward_clipped = drawn->rewards_clipped;

  RewardSummary all;
  for (const auto& r : drawn->verdicts.results()) {
    all.mean_reward += r.reward();
    all.accuracy += r.verdict() == v1::CORRECT;
  }
  const int n = drawn->verdicts.results_size();
  all.mean_reward = n > 0 ? all.mean_reward / n : 0;
  all.accuracy = n > 0 ? all.accuracy / n : 0;

  const GroupSelection selection = SelectGroups(useful, want);
  // Left out for equal rewards: counted by cause (a failed verifier first).
  for (int64_t g = 0; g < static_cast<int64_t>(useful.size()); ++g) {
    if (useful[g]) continue;
    for (int64_t i = g * group; i < (g + 1) * group; ++i) {
      CountNoGradient(drawn->verdicts.results(static_cast<int>(i)).verdict(), &counts);
    }
  }
  counts.samples_surplus += selection.surplus * group;
  StepSamples kept;
  *kept.verdicts.mutable_stats() = drawn->verdicts.stats();
  kept.rollout.set_generated_tokens(drawn->rollout.generated_tokens());
  kept.rollout.set_kv_cache_bytes(drawn->rollout.kv_cache_bytes());
  for (int64_t g : selection.kept) {
    kept.examples.push_back(drawn->examples[g]);
    for (int64_t i = g * group; i < (g + 1) * group; ++i) {
      *kept.rollout.add_samples() = std::move(*drawn->rollout.mutable_samples(i));
      *kept.verdicts.add_results() = std::move(*drawn->verdicts.mutable_results(i));
    }
  }
  *drawn = std::move(kept);
  return all;
}

}  // namespace trellis::loop
