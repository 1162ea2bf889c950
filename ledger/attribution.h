#ifndef TRELLIS_LEDGER_ATTRIBUTION_H_
#define TRELLIS_LEDGER_ATTRIBUTION_H_

// Memory attribution: a peak the memory tracker measured, and the resident
// objects the roles reported that make it up. What the objects do not
// explain is its own line, `unattributed_bytes`, never folded into another.
//
// The rule (ledger/README.md, "Attribution"): a peak is measured inside one
// span; every (role, object) counts at the largest size it had while that
// span was open (its size when the span began, and every report during it).
// Roles report transient objects (activations, workspace, KV cache) at their
// size at the role's own peak and report 0 when they free them, so a
// transient counts only in the spans it lived in.

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace trellis::ledger {

// One role's object in a peak's composition.
struct ObjectShare {
  std::string role;
  std::string object;  // ObjectName()
  int64_t bytes = 0;
};

struct PeakAttribution {
  // The span that reached the peak: its role, stage and step.
  std::string role;
  std::string stage;
  int64_t step = -1;
  // The tracker's peak inside that span (c10 CPU allocator, whole process).
  int64_t measured_bytes = 0;
  // Every object live during the span, largest first.
  std::vector<ObjectShare> objects;
  int64_t attributed_bytes = 0;
  // measured - attributed. Negative when objects counted at their largest
  // sizes were not all at those sizes at the same moment.
  int64_t unattributed_bytes = 0;

  // unattributed / measured (0 when nothing was measured).
  double unattributed_fraction() const;
};

// {"role", "stage", "step", "measured_bytes", "attributed_bytes",
//  "unattributed_bytes", "unattributed_fraction",
//  "objects": [{"role", "object", "bytes"}, ...]}
nlohmann::json PeakAttributionJson(const PeakAttribution& peak);
// PeakAttributionJson's inverse; throws nlohmann::json::exception on a
// malformed value.
PeakAttribution PeakAttributionFromJson(const nlohmann::json& j);

// One table per peak: each object's bytes and share of the measured peak,
// then the unattributed line and the measured total.
void PrintAttribution(const std::vector<PeakAttribution>& peaks, std::ostream& out);

}  // namespace trellis::ledger

#endif  // TRELLIS_LEDGER_ATTRIBUTION_H_
