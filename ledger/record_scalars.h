#ifndef TRELLIS_LEDGER_RECORD_SCALARS_H_
#define TRELLIS_LEDGER_RECORD_SCALARS_H_

// A run's ledger records (ledger/README.md) as named scalars over steps,
// for the metric sinks (observe/, docs/observe.md): every number of each
// step record, each role's memory over the step, and each evaluation.
//
// Not thread-safe: one reader (under the ledger's lock, in record order).

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace trellis::ledger {

struct Scalar {
  // Letters, digits and "_-./ " only (what TensorBoard and MLflow both
  // take): nested fields joined by "/", anything else written "_".
  std::string tag;
  double value = 0;
};

struct ScalarPoint {
  int64_t step = 0;
  std::vector<Scalar> scalars;
};

// Every number in `j` (objects flattened: "stage_seconds/rollout"; true and
// false as 1 and 0; strings, arrays and non-finite numbers left out), each
// tag starting with `prefix` ("" or ending in "/"), in key order.
void AppendScalars(const nlohmann::json& j, const std::string& prefix, std::vector<Scalar>* out);

class RecordScalars {
 public:
  // Reads one record. A step record gives its point at its "step": every
  // number of the record but "step" and "time", and
  // "memory_peak_bytes/<role>", the most bytes of resident objects the role
  // reported at once during the step (its objects as the step found them
  // when it reported none). An eval record gives "eval/<field>" (accuracy,
  // mean_reward, prompts, ...) at the number of steps trained before it
  // (its "step" + 1: "before" at 0, "after" at the run's steps). Other
  // records give none. InvalidArgument as RunView::Add for a malformed one.
  [[nodiscard]] absl::StatusOr<std::optional<ScalarPoint>> Add(std::string_view record);

 private:
  // Each role's latest bytes of each object, and the most its objects
  // summed to during the open step.
  std::map<std::string, std::map<std::string, int64_t>> held_;
  std::map<std::string, int64_t> step_peak_;
};

}  // namespace trellis::ledger

#endif  // TRELLIS_LEDGER_RECORD_SCALARS_H_
