#ifndef TRELLIS_LOOP_FIXED_DATA_H_
#define TRELLIS_LOOP_FIXED_DATA_H_

// Pieces the recipes that train on fixed data share (sft, dpo,
// reward_model): the head of a dataset, sums of held-out evaluation
// batches, and the progress line.

#include <cstdint>
#include <string>
#include <vector>

#include "ledger/ledger.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::loop {

// The first `limit` items (all when limit is 0).
template <typename T>
std::vector<T> Head(const std::vector<T>& items, int64_t limit) {
  if (limit <= 0 || static_cast<size_t>(limit) >= items.size()) return items;
  return std::vector<T>(items.begin(), items.begin() + limit);
}

// Sums of a held-out evaluation's batches, weighted by what each measured
// over.
struct EvalSums {
  double weight = 0;
  double loss = 0;
  double accuracy = 0;
  double margin = 0;
  int64_t rows = 0;
  // `weight_of_loss`: tokens for an SFT loss (token mean), pairs for a
  // preference loss (mean over pairs).
  void Add(const v1::TrainStats& s, int64_t rows_in_batch, double weight_of_loss,
           double accuracy_of_rows);
};

// The progress line of `step` (of `steps`), every tenth of the run and at
// its end; "" otherwise. `preference`: pair training (accuracy is the
// preference accuracy, with the reward margin), else SFT (exact match).
std::string FixedDataProgress(int64_t step, int64_t steps, const ledger::StepCounts& counts,
                              const ledger::StepMetrics& metrics, bool preference);

}  // namespace trellis::loop

#endif  // TRELLIS_LOOP_FIXED_DATA_H_
