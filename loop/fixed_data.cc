#include "loop/fixed_data.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace trellis::loop {

void EvalSums::Add(const v1::TrainStats& s, int64_t rows_in_batch, double weight_of_loss,
                   double accuracy_of_rows) {
  weight += weight_of_loss;
  loss += s.loss() * weight_of_loss;
  accuracy += accuracy_of_rows * rows_in_batch;
  margin += s.reward_margin() * rows_in_batch;
  rows += rows_in_batch;
}

std::string FixedDataProgress(int64_t step, int64_t steps, const ledger::StepCounts& counts,
                              const ledger::StepMetrics& metrics, bool preference) {
  const int64_t every = std::max<int64_t>(1, steps / 10);
  if ((step + 1) % every != 0 && step + 1 != steps) return "";
  return absl::StrFormat("step %4d/%d  loss %.4f  %s %.3f%s  step %.3fs\n", step + 1, steps,
                         counts.loss, preference ? "pref-acc" : "exact-match", counts.accuracy,
                         preference ? absl::StrFormat("  margin %.3f", counts.reward_margin) : "",
                         metrics.step_seconds);
}

}  // namespace trellis::loop
