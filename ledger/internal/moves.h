#ifndef TRELLIS_LEDGER_INTERNAL_MOVES_H_
#define TRELLIS_LEDGER_INTERNAL_MOVES_H_

// The run's totals of the moves between device and host (Ledger::RecordMove),
// for summary.json and a checkpoint's ledger state. Private to ledger/.

#include <array>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/statusor.h"
#include "ledger/ledger.h"

namespace trellis::ledger::internal {

struct MoveTotals {
  int64_t count = 0;
  int64_t bytes = 0;
  double seconds = 0;
  // Per object: bytes and seconds of its moves, both directions.
  std::array<int64_t, kNumObjects> object_bytes{};
  std::array<double, kNumObjects> object_seconds{};
  // The most bytes all roles together held offloaded in host memory.
  int64_t host_peak_bytes = 0;
  // What each role holds offloaded now.
  std::map<std::string, int64_t, std::less<>> host_bytes;

  // Adds one move; returns the role's host bytes after it.
  int64_t Add(std::string_view role, Object object, MoveDirection direction, int64_t bytes,
              double seconds);
};

// summary.json "moves": {"count", "bytes", "seconds", "bytes_per_step",
// "seconds_per_step", "host_peak_bytes", "objects": {name: {"bytes",
// "seconds"}}} (objects that moved only), over `steps` steps.
nlohmann::json MoveTotalsJson(const MoveTotals& totals, int64_t steps);
// MoveTotalsJson's inverse (a checkpoint's state; host bytes now are not
// kept: a resumed role starts with everything on its device). A null value
// (a checkpoint from before moves were recorded) reads as none. DataLoss
// naming an unknown object; throws nlohmann::json::exception on a
// malformed value.
absl::StatusOr<MoveTotals> MoveTotalsFromJson(const nlohmann::json& j);

}  // namespace trellis::ledger::internal

#endif  // TRELLIS_LEDGER_INTERNAL_MOVES_H_
