#include "learner/advantages.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::learner {
namespace {

TEST(GroupAdvantagesTest, MatchesHandComputedGroups) {
  // Group 1: {1, 0, 0, 1}: mean 0.5, population std 0.5 -> +-1.
  // Group 2: {1, 1, 1, 1}: zero variance -> all 0.
  // Group 3: {0, 0, 0, 1}: mean 0.25, std sqrt(0.1875) = 0.4330127.
  const std::vector<float> rewards = {1, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 1};
  absl::StatusOr<GroupAdvantages> adv = ComputeGroupAdvantages(rewards, 4, true, 0.0);
  ASSERT_TRUE(adv.ok()) << adv.status();
  const double s3 = std::sqrt(0.1875);
  const std::vector<double> expected = {1,         -1,        -1,        1,
                                        0,         0,         0,         0,
                                        -0.25 / s3, -0.25 / s3, -0.25 / s3, 0.75 / s3};
  ASSERT_EQ(adv->advantages.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(adv->advantages[i], expected[i], 1e-6) << "sample " << i;
  }
  EXPECT_EQ(std::count(adv->zero_variance.begin(), adv->zero_variance.end(), true), 1);
  EXPECT_THAT(adv->zero_variance, testing::ElementsAre(false, true, false));
}

TEST(GroupAdvantagesTest, DrGrpoSkipsTheStdDivision) {
  const std::vector<float> rewards = {0, 0, 0, 1};
  absl::StatusOr<GroupAdvantages> adv = ComputeGroupAdvantages(rewards, 4, false);
  ASSERT_TRUE(adv.ok());
  EXPECT_THAT(adv->advantages, testing::ElementsAre(-0.25f, -0.25f, -0.25f, 0.75f));
}

TEST(GroupAdvantagesTest, RejectsRaggedGroups) {
  const std::vector<float> rewards = {0, 1, 0};
  absl::StatusOr<GroupAdvantages> adv = ComputeGroupAdvantages(rewards, 2, true);
  EXPECT_EQ(adv.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(adv.status().message()), testing::HasSubstr("groups of 2"));
}

}  // namespace
}  // namespace trellis::learner
