// The controller against fake throughput curves (no clock): tokens per
// second rise with the bound up to a knee and are flat after it.

#include "scheduler/concurrency_controller.h"

#include <algorithm>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::scheduler {
namespace {

using ::testing::Each;
using ::testing::HasSubstr;

constexpr int64_t kRows = 64;

// An actor whose throughput is 100 tokens/s per row up to `knee` rows, flat
// beyond, times a noise factor in [1 - noise, 1 + noise].
struct FakeActor {
  int64_t knee;
  double noise = 0;
  std::mt19937 random{7};

  ConcurrencyObservation Answer(int64_t budget) {
    std::uniform_real_distribution<double> factor(1 - noise, 1 + noise);
    const double rate = 100.0 * static_cast<double>(std::min(budget, knee)) * factor(random);
    return {budget, kRows, 1000, 1000 / rate};
  }
};

// Runs `requests` requests of kRows rows; the bounds asked, in order.
std::vector<int64_t> Drive(ConcurrencyController& controller, FakeActor& actor, int requests) {
  std::vector<int64_t> budgets;
  for (int i = 0; i < requests; ++i) {
    const int64_t budget = controller.Budget(kRows);
    budgets.push_back(budget);
    controller.Observe(actor.Answer(budget));
  }
  return budgets;
}

TEST(ConcurrencyControllerTest, GrowsToTheKneeAndStays) {
  ConcurrencyController controller(ConcurrencyOptions{});
  FakeActor actor{16};
  const std::vector<int64_t> budgets = Drive(controller, actor, 6);
  // 32 tokens/s no higher than 16's: it settles on 16.
  EXPECT_EQ(budgets, (std::vector<int64_t>{1, 2, 4, 8, 16, 32}));
  EXPECT_EQ(controller.settled_budget(), 16);
  // Settled: each probe goes one bound up and one down, then back.
  const std::vector<int64_t> after = Drive(controller, actor, 40);
  EXPECT_EQ(controller.settled_budget(), 16);
  EXPECT_THAT(after, Each(::testing::AnyOf(8, 16, 32)));
  EXPECT_EQ(std::count(after.begin(), after.end(), 16), 40 - 2 * (40 / 10));
}

TEST(ConcurrencyControllerTest, StaysAtTheKneeThroughNoise) {
  ConcurrencyController controller(ConcurrencyOptions{});
  FakeActor actor{16, /*noise=*/0.04};
  Drive(controller, actor, 8);
  ASSERT_EQ(controller.settled_budget(), 16);
  for (int i = 0; i < 200; ++i) {
    Drive(controller, actor, 1);
    EXPECT_EQ(controller.settled_budget(), 16) << "request " << i;
  }
}

TEST(ConcurrencyControllerTest, FindsAKneeThatMovedUpOrDown) {
  ConcurrencyController controller(ConcurrencyOptions{});
  FakeActor actor{8};
  Drive(controller, actor, 20);
  ASSERT_EQ(controller.settled_budget(), 8);
  actor.knee = 32;  // shorter responses, a lighter load: more rows pay
  Drive(controller, actor, 20);
  EXPECT_EQ(controller.settled_budget(), 32);
  actor.knee = 4;  // beyond 4 rows each step grows as fast as the batch
  Drive(controller, actor, 60);
  EXPECT_EQ(controller.settled_budget(), 4);
}

TEST(ConcurrencyControllerTest, StaysWithinTheRequestsRows) {
  ConcurrencyOptions options;
  options.initial = 6;
  ConcurrencyController controller(options);
  EXPECT_EQ(controller.Budget(4), 4);
  EXPECT_EQ(controller.Budget(0), 1);
  // Throughput rising with every row: growth stops at all 10 rows.
  for (int i = 0; i < 4; ++i) {
    const int64_t budget = controller.Budget(10);
    EXPECT_LE(budget, 10);
    controller.Observe({budget, 10, 100, 1.0 / static_cast<double>(budget)});
  }
  EXPECT_EQ(controller.settled_budget(), 10);
  // Nothing decoded: no throughput to learn from.
  controller.Observe({10, 10, 0, 0});
  EXPECT_EQ(controller.settled_budget(), 10);
}

TEST(ConcurrencyControllerTest, RefusesBadOptionsByName) {
  ConcurrencyOptions options;
  options.growth = 1;
  EXPECT_THAT(ValidateConcurrencyOptions(options).message(), HasSubstr("growth must be > 1"));
  options = {};
  options.rise = 0;
  EXPECT_THAT(ValidateConcurrencyOptions(options).message(), HasSubstr("rise"));
  options = {};
  options.initial = 0;
  EXPECT_THAT(ValidateConcurrencyOptions(options).message(), HasSubstr("initial"));
  EXPECT_TRUE(ValidateConcurrencyOptions({}).ok());
}

}  // namespace
}  // namespace trellis::scheduler
