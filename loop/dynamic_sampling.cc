#include "loop/dynamic_sampling.h"

#include <algorithm>

namespace trellis::loop {

std::vector<bool> UsefulGroups(absl::Span<const float> rewards, int64_t group_size) {
  std::vector<bool> useful;
  for (size_t g = 0; g + group_size <= rewards.size(); g += group_size) {
    bool differ = false;
    for (int64_t i = 1; i < group_size; ++i) differ = differ || rewards[g + i] != rewards[g];
    useful.push_back(differ);
  }
  return useful;
}

int64_t NextRoundPrompts(int64_t want, int64_t useful, int64_t drawn) {
  if (useful >= want) return 0;
  if (useful <= 0) return want;
  const int64_t shortfall = want - useful;
  // ceil(shortfall / (useful / drawn)).
  return std::min(want, (shortfall * drawn + useful - 1) / useful);
}

GroupSelection SelectGroups(const std::vector<bool>& useful, int64_t want) {
  GroupSelection out;
  for (size_t g = 0; g < useful.size(); ++g) {
    if (!useful[g]) {
      ++out.zero_variance;
    } else if (static_cast<int64_t>(out.kept.size()) < want) {
      out.kept.push_back(static_cast<int64_t>(g));
    } else {
      ++out.surplus;
    }
  }
  return out;
}

}  // namespace trellis::loop
