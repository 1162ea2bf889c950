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

// Groups {1, 0, 0} (3 responses), {1, 1} (all equal), {0, 1, 1, 0}.
const std::vector<float> kRewards = {1, 0, 0, 1, 1, 0, 1, 1, 0};
const std::vector<int64_t> kSizes = {3, 2, 4};

TEST(AdvantageEstimatorTest, GrpoPerGroupEqualsComputeGroupAdvantages) {
  absl::StatusOr<GroupAdvantages> a =
      ComputeAdvantages(v1::GrpoConfig::GRPO, kRewards, kSizes, true, 0.0);
  ASSERT_TRUE(a.ok()) << a.status();
  // {1, 0, 0}: mean 1/3, std sqrt(2)/3 -> (2/3) / (sqrt(2)/3) = sqrt(2), -1/sqrt(2).
  // {0, 1, 1, 0}: mean 0.5, std 0.5 -> -1, 1, 1, -1.
  const double r2 = std::sqrt(2.0);
  const std::vector<double> want = {r2, -1 / r2, -1 / r2, 0, 0, -1, 1, 1, -1};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(a->advantages[i], want[i], 1e-6) << i;
  EXPECT_THAT(a->zero_variance, testing::ElementsAre(false, true, false));
}

TEST(AdvantageEstimatorTest, RlooLeavesOneOutPerGroup) {
  absl::StatusOr<GroupAdvantages> a =
      ComputeAdvantages(v1::GrpoConfig::RLOO, kRewards, kSizes, true);
  ASSERT_TRUE(a.ok()) << a.status();
  // {1, 0, 0}: 1 - 0 = 1; 0 - (1 + 0) / 2 = -0.5 (twice).
  // {1, 1}: all equal -> 0. {0, 1, 1, 0}: 0 - 2/3, 1 - 1/3, 1 - 1/3, 0 - 2/3.
  const std::vector<double> want = {1, -0.5, -0.5, 0, 0, -2.0 / 3, 2.0 / 3, 2.0 / 3, -2.0 / 3};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(a->advantages[i], want[i], 1e-6) << i;
  EXPECT_THAT(a->zero_variance, testing::ElementsAre(false, true, false));
  // RLOO needs someone to leave out.
  EXPECT_EQ(ComputeAdvantages(v1::GrpoConfig::RLOO, {1, 0, 1}, {2, 1}, true)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(AdvantageEstimatorTest, ReinforcePlusPlusNormalizesOverTheBatch) {
  absl::StatusOr<GroupAdvantages> a =
      ComputeAdvantages(v1::GrpoConfig::REINFORCE_PP, kRewards, kSizes, true, 0.0);
  ASSERT_TRUE(a.ok()) << a.status();
  // 5 ones in 9: mean 5/9, population std sqrt(5/9 * 4/9) = sqrt(20)/9.
  // A(1) = (4/9) / (sqrt(20)/9) = 4/sqrt(20); A(0) = -5/sqrt(20). The group
  // {1, 1} is not a baseline of its own: it keeps a positive advantage.
  const double s = std::sqrt(20.0);
  for (size_t i = 0; i < kRewards.size(); ++i) {
    EXPECT_NEAR(a->advantages[i], kRewards[i] == 1 ? 4 / s : -5 / s, 1e-6) << i;
  }
  EXPECT_THAT(a->zero_variance, testing::ElementsAre(false, false, false));
  absl::StatusOr<GroupAdvantages> flat =
      ComputeAdvantages(v1::GrpoConfig::REINFORCE_PP, {1, 1, 1, 1}, {2, 2}, true);
  ASSERT_TRUE(flat.ok());
  EXPECT_THAT(flat->advantages, testing::ElementsAre(0, 0, 0, 0));
  EXPECT_THAT(flat->zero_variance, testing::ElementsAre(true, true));
}

TEST(AdvantageEstimatorTest, RejectsSizesThatDoNotAddUp) {
  absl::StatusOr<GroupAdvantages> a =
      ComputeAdvantages(v1::GrpoConfig::GRPO, kRewards, {3, 2}, true);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(a.status().message()), testing::HasSubstr("add up to 5"));
}

}  // namespace
}  // namespace trellis::learner

namespace trellis::learner {
namespace {

TEST(AdvantagesWithoutTest, DroppedSamplesLeaveTheirGroupsBaselineAndLoneSurvivorsDropTheGroup) {
  const std::vector<float> rewards = {1, 0, 1, 0, /**/ 1, 1, 0, 0};
  std::vector<bool> dropped = {false, false, true, false, /**/ false, true, true, true};
  absl::StatusOr<GroupAdvantages> a =
      AdvantagesWithout(v1::GrpoConfig::GRPO, rewards, dropped, 4, /*scale=*/false);
  ASSERT_TRUE(a.ok()) << a.status();
  // Group 1 keeps {1, 0, 0}: mean 1/3. Group 2 keeps one sample: dropped whole.
  const std::vector<float> want = {2.0f / 3, -1.0f / 3, 0, -1.0f / 3, 0, 0, 0, 0};
  ASSERT_EQ(a->advantages.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(a->advantages[i], want[i], 1e-6) << i;
  EXPECT_EQ(dropped, (std::vector<bool>{false, false, true, false, true, true, true, true}));
  EXPECT_EQ(a->zero_variance, (std::vector<bool>{false, false}));
}

}  // namespace
}  // namespace trellis::learner
