#ifndef TRELLIS_LOOP_ROLLOUT_RECIPE_H_
#define TRELLIS_LOOP_ROLLOUT_RECIPE_H_

// What every recipe that rolls out shares: the driver's warm-up and frozen
// reference before the run, its greedy held-out evaluation, and the
// accuracy headline. A rolling-out recipe adds its Step and Progress.

#include <string>

#include "loop/driver.h"
#include "loop/recipe.h"

namespace trellis::loop {

class RolloutRecipe : public Recipe {
 public:
  explicit RolloutRecipe(Driver& driver) : driver_(driver) {}

  [[nodiscard]] absl::Status Prepare() override { return driver_.PrepareRollouts(); }
  [[nodiscard]] absl::StatusOr<ledger::EvalMetrics> Evaluate(const std::string& label) override {
    return driver_.EvaluateRollouts(label);
  }
  std::string Headline(const ledger::EvalMetrics& before,
                       const ledger::EvalMetrics& after) const override;

 protected:
  Driver& driver_;
};

}  // namespace trellis::loop

#endif  // TRELLIS_LOOP_ROLLOUT_RECIPE_H_
