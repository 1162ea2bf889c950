#ifndef TRELLIS_LEDGER_ATTRIBUTION_H_
#define TRELLIS_LEDGER_ATTRIBUTION_H_

// Memory attribution: a peak the memory tracker measured, and the resident
// objects the roles reported that make it up. What the objects do not
// explain is its own line, `unattributed_bytes`, never folded into another.
//
// The rule (ledger/README.md, "Attribution"): a peak is measured inside one
// span; each role's objects count at their sizes at the moment while that
// span was open (when it began, or just after one of its reports) when they
// summed largest for that role. Roles report transient objects (activations,
// workspace, KV cache) at their size at the role's own peak, beside its
// residents, and report 0 when they free them, so a transient counts only in
// the spans it lived in, and a span of several calls (a multi-turn rollout's
// turns) counts the largest call's transients together, never one call's KV
// cache with another's workspace.

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
  // Empty: the CPU tracker's peak (c10 CPU allocator, whole process). Else
  // the device whose peak this is ("cuda:0": its caching allocator's
  // allocated bytes, every thread's), attributed to the objects of the
  // roles computing on it.
  std::string device;
  // The peak inside that span: the CPU tracker's live bytes, or the
  // device's allocated bytes.
  int64_t measured_bytes = 0;
  // A device's peak reserved bytes inside the span (0 on the CPU, where
  // reserved equals allocated); reserved - measured is its fragmentation.
  int64_t reserved_bytes = 0;
  // Every object live during the span, largest first.
  std::vector<ObjectShare> objects;
  int64_t attributed_bytes = 0;
  // measured - attributed. Negative when the roles' objects, each role's
  // at its own largest moment, were not all at those sizes at once.
  int64_t unattributed_bytes = 0;

  // unattributed / measured (0 when nothing was measured).
  double unattributed_fraction() const;
  // A device's reserved - measured: what its allocator held beyond the
  // live blocks at the span's peaks (0 on the CPU).
  int64_t fragmentation_bytes() const;
};

// {"role", "stage", "step", "measured_bytes", "attributed_bytes",
//  "unattributed_bytes", "unattributed_fraction",
//  "objects": [{"role", "object", "bytes"}, ...]}, and for a device's peak
// also "device", "reserved_bytes" and "fragmentation_bytes".
nlohmann::json PeakAttributionJson(const PeakAttribution& peak);
// PeakAttributionJson's inverse; throws nlohmann::json::exception on a
// malformed value.
PeakAttribution PeakAttributionFromJson(const nlohmann::json& j);

// One table per peak: each object's bytes and share of the measured peak,
// then the unattributed line and the measured total.
void PrintAttribution(const std::vector<PeakAttribution>& peaks, std::ostream& out);

}  // namespace trellis::ledger

#endif  // TRELLIS_LEDGER_ATTRIBUTION_H_
