#include "loop/rollout_recipe.h"

#include "absl/strings/str_format.h"

namespace trellis::loop {

std::string RolloutRecipe::Headline(const ledger::EvalMetrics& before,
                                    const ledger::EvalMetrics& after) const {
  return absl::StrFormat("held-out accuracy (greedy): before %.3f  after %.3f  (%+.1f points)\n",
                         before.accuracy, after.accuracy, 100 * (after.accuracy - before.accuracy));
}

}  // namespace trellis::loop
