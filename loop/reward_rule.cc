#include "loop/reward_rule.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace trellis::loop {

RewardRuleCounts ApplyRewardRule(const v1::VerifierConfig& config, v1::VerifyResponse* verdicts) {
  RewardRuleCounts counts;
  const float bound = config.max_abs_reward();
  for (v1::VerifyResult& r : *verdicts->mutable_results()) {
    const float reward = r.reward();
    if (!std::isfinite(reward)) {
      r.set_detail(absl::StrCat("non-finite reward ", reward, " (verdict ",
                                v1::Verdict_Name(r.verdict()), ", detail \"", r.detail(),
                                "\"): an error by the reward rule"));
      r.set_verdict(v1::ERROR);
      r.set_reward(config.reward_wrong());
      ++counts.nonfinite;
    } else if (std::fabs(reward) > bound) {
      r.set_reward(std::clamp(reward, -bound, bound));
      ++counts.clipped;
    }
  }
  return counts;
}

}  // namespace trellis::loop
