#ifndef TRELLIS_LEDGER_INTERNAL_ROLE_BUSY_H_
#define TRELLIS_LEDGER_INTERNAL_ROLE_BUSY_H_

// Each role's busy time in a step, from the spans it ran: the union of its
// spans' intervals (spans of one role that overlap, a verification beside a
// rollout, count once), clipped to the step. The bubble fraction is the
// share of the roles' time in the step that none of their spans covered.

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace trellis::ledger::internal {

// [start, end) in the ledger's clock, seconds.
using Interval = std::pair<double, double>;

class RoleBusy {
 public:
  void Add(const std::string &role, double start, double end);
  // Busy seconds of every role with a span in [begin, end), each the union
  // of its intervals clipped to the window.
  std::map<std::string, double> BusySeconds(double begin, double end) const;
  void Clear() { spans_.clear(); }

 private:
  std::map<std::string, std::vector<Interval>> spans_;
};

// 1 - (sum of busy seconds) / (roles x step seconds); 0 when the step took
// no time or no role ran.
double BubbleFraction(const std::map<std::string, double> &busy, double step_seconds);

}  // namespace trellis::ledger::internal

#endif  // TRELLIS_LEDGER_INTERNAL_ROLE_BUSY_H_
