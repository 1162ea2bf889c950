#include "ledger/attribution.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_format.h"

namespace trellis::ledger {

using nlohmann::json;

double PeakAttribution::unattributed_fraction() const {
  return measured_bytes > 0
             ? static_cast<double>(unattributed_bytes) / static_cast<double>(measured_bytes)
             : 0.0;
}

json PeakAttributionJson(const PeakAttribution& peak) {
  json objects = json::array();
  for (const ObjectShare& o : peak.objects) {
    objects.push_back({{"role", o.role}, {"object", o.object}, {"bytes", o.bytes}});
  }
  return {{"role", peak.role},
          {"stage", peak.stage},
          {"step", peak.step},
          {"measured_bytes", peak.measured_bytes},
          {"attributed_bytes", peak.attributed_bytes},
          {"unattributed_bytes", peak.unattributed_bytes},
          {"unattributed_fraction", peak.unattributed_fraction()},
          {"objects", objects}};
}

PeakAttribution PeakAttributionFromJson(const json& j) {
  PeakAttribution peak;
  peak.role = j.at("role").get<std::string>();
  peak.stage = j.at("stage").get<std::string>();
  peak.step = j.at("step").get<int64_t>();
  peak.measured_bytes = j.at("measured_bytes").get<int64_t>();
  peak.attributed_bytes = j.at("attributed_bytes").get<int64_t>();
  peak.unattributed_bytes = j.at("unattributed_bytes").get<int64_t>();
  for (const json& o : j.at("objects")) {
    peak.objects.push_back({o.at("role").get<std::string>(), o.at("object").get<std::string>(),
                            o.at("bytes").get<int64_t>()});
  }
  return peak;
}

void PrintAttribution(const std::vector<PeakAttribution>& peaks, std::ostream& out) {
  for (const PeakAttribution& peak : peaks) {
    out << absl::StrFormat("peak of %s: %s, step %d, measured %d bytes\n", peak.role,
                           peak.stage, peak.step, peak.measured_bytes);
    const double measured = peak.measured_bytes > 0 ? peak.measured_bytes : 1;
    for (const ObjectShare& o : peak.objects) {
      out << absl::StrFormat("  %-12s %-16s %12d  %5.1f%%\n", o.role, o.object, o.bytes,
                             100.0 * o.bytes / measured);
    }
    out << absl::StrFormat("  %-29s %12d  %5.1f%%\n", "unattributed", peak.unattributed_bytes,
                           100.0 * peak.unattributed_fraction());
  }
}

}  // namespace trellis::ledger
