// Ledger::RecordMove and the run's move totals (ledger/internal/moves.h).
#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/str_cat.h"
#include "ledger/internal/ledger_impl.h"
#include "ledger/internal/metrics.h"
#include "ledger/internal/moves.h"
#include "ledger/ledger.h"

namespace trellis::ledger {

using nlohmann::json;

namespace internal {

int64_t MoveTotals::Add(std::string_view role, Object object, MoveDirection direction,
                        int64_t bytes, double seconds) {
  count += 1;
  this->bytes += bytes;
  this->seconds += seconds;
  object_bytes[static_cast<int>(object)] += bytes;
  object_seconds[static_cast<int>(object)] += seconds;
  auto it = host_bytes.find(role);
  if (it == host_bytes.end()) it = host_bytes.emplace(std::string(role), 0).first;
  it->second =
      std::max<int64_t>(0, it->second + (direction == MoveDirection::kOut ? bytes : -bytes));
  int64_t held = 0;
  for (const auto& [r, b] : host_bytes) held += b;
  host_peak_bytes = std::max(host_peak_bytes, held);
  return it->second;
}

json MoveTotalsJson(const MoveTotals& totals, int64_t steps) {
  json objects = json::object();
  for (int o = 0; o < kNumObjects; ++o) {
    if (totals.object_bytes[o] == 0 && totals.object_seconds[o] == 0) continue;
    objects[std::string(ObjectName(static_cast<Object>(o)))] = {
        {"bytes", totals.object_bytes[o]}, {"seconds", totals.object_seconds[o]}};
  }
  return {
      {"count", totals.count},
      {"bytes", totals.bytes},
      {"seconds", totals.seconds},
      {"bytes_per_step", SafeDiv(static_cast<double>(totals.bytes), static_cast<double>(steps))},
      {"seconds_per_step", SafeDiv(totals.seconds, static_cast<double>(steps))},
      {"host_peak_bytes", totals.host_peak_bytes},
      {"objects", objects}};
}

absl::StatusOr<MoveTotals> MoveTotalsFromJson(const json& j) {
  MoveTotals totals;
  if (j.is_null()) return totals;
  totals.count = j.at("count").get<int64_t>();
  totals.bytes = j.at("bytes").get<int64_t>();
  totals.seconds = j.at("seconds").get<double>();
  totals.host_peak_bytes = j.at("host_peak_bytes").get<int64_t>();
  for (const auto& [name, o] : j.at("objects").items()) {
    const std::optional<Object> object = ObjectFromName(name);
    if (!object.has_value()) {
      return absl::DataLossError(
          absl::StrCat("ledger state: moves: unknown object \"", name, "\""));
    }
    totals.object_bytes[static_cast<int>(*object)] = o.at("bytes").get<int64_t>();
    totals.object_seconds[static_cast<int>(*object)] = o.at("seconds").get<double>();
  }
  return totals;
}

}  // namespace internal

void Ledger::RecordMove(std::string_view role, Object object, MoveDirection direction,
                        int64_t bytes, double seconds, Stage stage) {
  const double now = impl_->now();
  RecordForward forward;
  {
    absl::MutexLock lock(&impl_->mu);
    Impl& d = *impl_;
    const int64_t host_bytes = d.moves.Add(role, object, direction, bytes, seconds);
    d.cur.moves += 1;
    d.cur.move_bytes += bytes;
    d.cur.move_seconds += seconds;
    d.Write({{"type", "move"},
             {"step", d.step},
             {"role", role},
             {"object", ObjectName(object)},
             {"direction", MoveDirectionName(direction)},
             {"bytes", bytes},
             {"seconds", seconds},
             {"gbps", internal::SafeDiv(static_cast<double>(bytes), seconds) / 1e9},
             {"host_bytes", host_bytes},
             {"stage", StageName(stage)},
             {"time", now - d.t0}});
    forward = d.forward;
  }
  if (forward) forward(role, ForwardedMove{object, direction, bytes, seconds, stage});
}

}  // namespace trellis::ledger
