#include "loop/recipes/online_dpo.h"

#include "gtest/gtest.h"

namespace trellis::loop {
namespace {

TEST(ChoosePairsTest, HighestChosenLowestRejectedEqualGroupsGiveNone) {
  // Group 0: max 1 at 1 (the first of two), min 0 at 0. Group 1: all 0.5.
  // Group 2: max 0.7 at 7, min -1 at 6 (the first of two). The trailing
  // partial group (two rewards) is ignored.
  const std::vector<float> rewards = {0, 1, 1, 0.5f, 0.5f, 0.5f, -1, 0.7f, -1, 3, 4};
  const std::vector<std::optional<PairChoice>> pairs = ChoosePairs(rewards, 3);
  ASSERT_EQ(pairs.size(), 3u);
  ASSERT_TRUE(pairs[0].has_value());
  EXPECT_EQ(pairs[0]->chosen, 1);
  EXPECT_EQ(pairs[0]->rejected, 0);
  EXPECT_FALSE(pairs[1].has_value());
  ASSERT_TRUE(pairs[2].has_value());
  EXPECT_EQ(pairs[2]->chosen, 7);
  EXPECT_EQ(pairs[2]->rejected, 6);
}

}  // namespace
}  // namespace trellis::loop
