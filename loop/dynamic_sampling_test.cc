#include "loop/dynamic_sampling.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::loop {
namespace {

using ::testing::ElementsAre;

TEST(DynamicSamplingTest, UsefulGroupsAreThoseWhoseRewardsDiffer) {
  const std::vector<float> rewards = {1, 1, 1, 0, 1, 0, 0.5f, 0.5f, 1, 0, 0, 0};
  EXPECT_THAT(UsefulGroups(rewards, 3), ElementsAre(false, true, true, false));
  EXPECT_THAT(UsefulGroups(rewards, 2), ElementsAre(false, true, true, false, true, false));
}

TEST(DynamicSamplingTest, NextRoundDrawsTheShortfallOverTheUsefulRate) {
  EXPECT_EQ(NextRoundPrompts(8, 8, 10), 0);
  EXPECT_EQ(NextRoundPrompts(8, 0, 8), 8);  // nothing useful yet: a full batch
  EXPECT_EQ(NextRoundPrompts(8, 4, 8), 8);  // 4 short at 1/2 -> 8
  EXPECT_EQ(NextRoundPrompts(8, 6, 8), 3);  // 2 short at 3/4 -> 2.67 -> 3
  EXPECT_EQ(NextRoundPrompts(8, 1, 8), 8);  // 7 short at 1/8 -> 56, capped at 8
}

TEST(DynamicSamplingTest, SelectKeepsTheFirstUsefulGroups) {
  GroupSelection s = SelectGroups({true, false, true, true, false, true}, 3);
  EXPECT_THAT(s.kept, ElementsAre(0, 2, 3));
  EXPECT_EQ(s.zero_variance, 2);
  EXPECT_EQ(s.surplus, 1);
  GroupSelection few = SelectGroups({false, true}, 3);
  EXPECT_THAT(few.kept, ElementsAre(1));
  EXPECT_EQ(few.zero_variance, 1);
  EXPECT_EQ(few.surplus, 0);
}

}  // namespace
}  // namespace trellis::loop
