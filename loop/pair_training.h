#ifndef TRELLIS_LOOP_PAIR_TRAINING_H_
#define TRELLIS_LOOP_PAIR_TRAINING_H_

// Training on a fixed dataset of preference pairs, what dpo and
// reward_model share: the pairs (data.preference_*_path, or arithmetic
// pairs built from the job's examples), the preference step, the held-out
// preference evaluation every eval_every steps, and the headline. A recipe
// brings its settings and whatever it adds to the pairs (DPO: reference
// log-probs).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "loop/driver.h"
#include "loop/recipe.h"

namespace trellis::loop {

class PairRecipe : public Recipe {
 public:
  // Training on preference pairs: dpo's or reward_model's settings.
  struct Settings {
    int64_t steps = 0;
    int64_t batch_size = 0;
    int64_t eval_every = 0;
    int64_t eval_pairs = 0;
  };
  PairRecipe(Driver& driver, Settings settings) : driver_(driver), settings_(settings) {}

  // Loads the pairs; a recipe adds its own preparation after.
  [[nodiscard]] absl::Status Prepare() override;
  [[nodiscard]] absl::StatusOr<ledger::EvalMetrics> Evaluate(const std::string& label) override;
  [[nodiscard]] absl::Status Step(int64_t step, ledger::StepCounts& counts) final;
  std::string Progress(int64_t step, const ledger::StepCounts& counts,
                       const ledger::StepMetrics& metrics) const final;
  int64_t eval_every() const final { return settings_.eval_every; }
  std::string Headline(const ledger::EvalMetrics& before,
                       const ledger::EvalMetrics& after) const final;

 protected:
  // Before the pairs of a step (`pairs`) train, or the held-out pairs are
  // evaluated (`eval` true): nothing by default.
  [[nodiscard]] virtual absl::Status BeforeUse(std::vector<v1::PreferencePair*> pairs, bool eval) {
    return absl::OkStatus();
  }

  Driver& driver_;
  std::vector<v1::PreferencePair> train_pairs_;
  std::vector<v1::PreferencePair> eval_pairs_;

 private:
  const Settings settings_;
  // The order the training pairs are drawn in.
  std::unique_ptr<data::PromptStream> stream_;
};

}  // namespace trellis::loop

#endif  // TRELLIS_LOOP_PAIR_TRAINING_H_
