#include "ledger/internal/role_busy.h"

#include <algorithm>

namespace trellis::ledger::internal {

void RoleBusy::Add(const std::string &role, double start, double end) {
  if (end > start) spans_[role].emplace_back(start, end);
}

std::map<std::string, double> RoleBusy::BusySeconds(double begin, double end) const {
  std::map<std::string, double> busy;
  for (const auto &[role, spans] : spans_) {
    std::vector<Interval> clipped;
    for (const auto &[s, e] : spans) {
      const double a = std::max(s, begin);
      const double b = std::min(e, end);
      if (b > a) clipped.emplace_back(a, b);
    }
    if (clipped.empty()) continue;
    std::sort(clipped.begin(), clipped.end());
    double total = 0;
    double open = clipped.front().first;
    double close = clipped.front().second;
    for (const auto &[a, b] : clipped) {
      if (a > close) {
        total += close - open;
        open = a;
      }
      close = std::max(close, b);
    }
    busy[role] = total + (close - open);
  }
  return busy;
}

double BubbleFraction(const std::map<std::string, double> &busy, double step_seconds) {
  if (step_seconds <= 0 || busy.empty()) return 0;
  double total = 0;
  for (const auto &[role, seconds] : busy) total += seconds;
  return std::max(0.0, 1.0 - total / (step_seconds * static_cast<double>(busy.size())));
}

}  // namespace trellis::ledger::internal
