#include "learner/advantages.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace trellis::learner {

absl::StatusOr<GroupAdvantages> ComputeGroupAdvantages(
    absl::Span<const float> rewards, int64_t group_size, bool scale, double eps) {
  if (group_size < 1 || rewards.size() % group_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("advantages: ", rewards.size(),
                     " rewards do not split into groups of ", group_size));
  }
  GroupAdvantages out;
  out.advantages.resize(rewards.size());
  for (size_t g = 0; g < rewards.size(); g += group_size) {
    double mean = 0;
    for (int64_t i = 0; i < group_size; ++i) mean += rewards[g + i];
    mean /= group_size;
    double var = 0;
    bool all_equal = true;
    for (int64_t i = 0; i < group_size; ++i) {
      const double d = rewards[g + i] - mean;
      var += d * d;
      all_equal = all_equal && rewards[g + i] == rewards[g];
    }
    const double denom = scale ? std::sqrt(var / group_size) + eps : 1.0;
    for (int64_t i = 0; i < group_size; ++i) {
      out.advantages[g + i] =
          all_equal ? 0.0f : static_cast<float>((rewards[g + i] - mean) / denom);
    }
    out.zero_variance.push_back(all_equal);
  }
  return out;
}

}  // namespace trellis::learner
