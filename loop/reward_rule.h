#ifndef TRELLIS_LOOP_REWARD_RULE_H_
#define TRELLIS_LOOP_REWARD_RULE_H_

// The reward rule (docs/verifier-protocol.md), applied by the driver to
// every verdict it takes from the verifier, in training and evaluation, so
// that no reward a verifier returns can overflow the advantages or the
// loss: a reward that is not a finite number is an error (verdict ERROR,
// reward verifier.reward_wrong, counted in samples_error as any ERROR); a
// finite reward beyond [-verifier.max_abs_reward, verifier.max_abs_reward]
// is clipped to the bound (counted in samples_reward_clipped).

#include <cstdint>

#include "trellis/v1/job.pb.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::loop {

struct RewardRuleCounts {
  int64_t nonfinite = 0;  // made ERROR
  int64_t clipped = 0;
};

// Applies the rule to every result of `verdicts` in place.
RewardRuleCounts ApplyRewardRule(const v1::VerifierConfig& config, v1::VerifyResponse* verdicts);

}  // namespace trellis::loop

#endif  // TRELLIS_LOOP_REWARD_RULE_H_
