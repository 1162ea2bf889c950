#include "learner/advantages.h"

#include <vector>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "learner/losses.h"

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

absl::StatusOr<GroupAdvantages> ComputeAdvantages(AdvantageEstimator estimator,
                                                  absl::Span<const float> rewards,
                                                  absl::Span<const int64_t> group_sizes,
                                                  bool scale, double eps) {
  size_t total = 0;
  for (int64_t size : group_sizes) {
    const int64_t least = estimator == v1::GrpoConfig::RLOO ? 2 : 1;
    if (size < least) {
      return absl::InvalidArgumentError(absl::StrCat(
          "advantages: groups need at least ", least, " rewards; found a group of ", size));
    }
    total += size;
  }
  if (total != rewards.size()) {
    return absl::InvalidArgumentError(absl::StrCat("advantages: group sizes add up to ", total,
                                                   ", found ", rewards.size(), " rewards"));
  }
  GroupAdvantages out;
  out.advantages.assign(rewards.size(), 0.0f);
  bool batch_equal = true;
  for (float r : rewards) batch_equal = batch_equal && r == rewards[0];
  if (estimator == v1::GrpoConfig::REINFORCE_PP && !batch_equal) {
    out.advantages = ReinforcePlusPlusAdvantages(rewards, eps);
  }
  size_t begin = 0;
  for (int64_t size : group_sizes) {
    const absl::Span<const float> group = rewards.subspan(begin, size);
    bool group_equal = true;
    for (float r : group) group_equal = group_equal && r == group[0];
    if (estimator == v1::GrpoConfig::GRPO) {
      absl::StatusOr<GroupAdvantages> g = ComputeGroupAdvantages(group, size, scale, eps);
      if (!g.ok()) return g.status();
      std::copy(g->advantages.begin(), g->advantages.end(), out.advantages.begin() + begin);
    } else if (estimator == v1::GrpoConfig::RLOO && !group_equal) {
      absl::StatusOr<std::vector<float>> g = RlooAdvantages(group, size);
      if (!g.ok()) return g.status();
      std::copy(g->begin(), g->end(), out.advantages.begin() + begin);
    }
    out.zero_variance.push_back(estimator == v1::GrpoConfig::REINFORCE_PP
                                    ? batch_equal
                                    : group_equal);
    begin += size;
  }
  return out;
}

absl::StatusOr<GroupAdvantages> AdvantagesWithout(AdvantageEstimator estimator,
                                                   const std::vector<float>& rewards,
                                                   std::vector<bool>& dropped, int64_t group,
                                                   bool scale) {
  if (group < 1 || rewards.size() % group != 0) {
    return ComputeGroupAdvantages(rewards, group, scale);  // its error
  }
  std::vector<float> sub;        // kept rewards of the groups that stay
  std::vector<size_t> where;     // each one's index in `rewards`
  std::vector<int64_t> sizes;    // of the groups that stay
  std::vector<bool> stays;       // per group
  for (size_t g = 0; g < rewards.size(); g += group) {
    std::vector<size_t> kept;
    for (size_t i = g; i < g + group; ++i) {
      if (!dropped[i]) kept.push_back(i);
    }
    stays.push_back(kept.size() >= 2);
    if (!stays.back()) {
      for (size_t i = g; i < g + group; ++i) dropped[i] = true;
      continue;
    }
    for (size_t i : kept) {
      sub.push_back(rewards[i]);
      where.push_back(i);
    }
    sizes.push_back(static_cast<int64_t>(kept.size()));
  }
  absl::StatusOr<GroupAdvantages> a =
      ComputeAdvantages(estimator, sub, sizes, scale);
  if (!a.ok()) return a.status();
  GroupAdvantages out;
  out.advantages.assign(rewards.size(), 0.0f);
  for (size_t k = 0; k < where.size(); ++k) out.advantages[where[k]] = a->advantages[k];
  size_t next = 0;
  for (bool stay : stays) out.zero_variance.push_back(stay ? a->zero_variance[next++] : false);
  return out;
}

}  // namespace trellis::learner
