#include "loop/rollout_recipe.h"

#include "absl/strings/str_format.h"

namespace trellis::loop {
namespace {

bool Incomplete(const ledger::EvalMetrics& eval) { return eval.unscored.value_or(0) > 0; }

// An evaluation's accuracy, or INCOMPLETE with its count of unscored
// prompts: an incomplete evaluation has no accuracy.
std::string Accuracy(const ledger::EvalMetrics& eval) {
  if (!Incomplete(eval)) return absl::StrFormat("%.3f", eval.accuracy);
  return absl::StrFormat("INCOMPLETE (%d of %d not scored)", *eval.unscored, eval.prompts);
}

}  // namespace

std::string RolloutRecipe::Headline(const ledger::EvalMetrics& before,
                                    const ledger::EvalMetrics& after) const {
  const std::string change =
      Incomplete(before) || Incomplete(after)
          ? ""
          : absl::StrFormat("  (%+.1f points)", 100 * (after.accuracy - before.accuracy));
  return absl::StrFormat("held-out accuracy (greedy): before %s  after %s%s\n", Accuracy(before),
                         Accuracy(after), change);
}

}  // namespace trellis::loop
