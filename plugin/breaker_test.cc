// The circuit breaker on a fake clock: one line per change of state, each
// naming the breaker, for every transition (closed to failing and open,
// open to half-open, half-open to open again and to closed).

#include "plugin/breaker.h"

#include <string>
#include <vector>

#include "env/testing/fake_env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::plugin {
namespace {

using ::testing::StartsWith;

class BreakerTest : public ::testing::Test {
 protected:
  env::testing::FakeEnv clock_;
  std::vector<std::string> log_;
  Breaker breaker_{"verifier", "math@2", 2, absl::Seconds(10), &clock_,
                   [this](const std::string& line) { log_.push_back(line); }};
};

TEST_F(BreakerTest, EveryChangeOfStateIsOneLineNamingTheBreaker) {
  EXPECT_EQ(breaker_.Admit(), "");
  EXPECT_FALSE(breaker_.Observe(true, "exit 1"));
  ASSERT_EQ(log_.size(), 1u);
  EXPECT_EQ(log_[0],
            "verifier math@2: failing: exit 1; the circuit opens after 2 consecutive failed calls");
  // closed -> open
  EXPECT_TRUE(breaker_.Observe(true, "exit 1"));
  ASSERT_EQ(log_.size(), 2u);
  EXPECT_THAT(log_[1], StartsWith("verifier math@2: circuit open: math@2 failed 2 consecutive "
                                  "calls (last: exit 1); paused until "));
  // Open during the pause: refused, no line.
  EXPECT_THAT(breaker_.Admit(), StartsWith("circuit open: "));
  EXPECT_EQ(log_.size(), 2u);
  // open -> half-open
  clock_.Advance(absl::Seconds(10));
  EXPECT_EQ(breaker_.Admit(), "");
  ASSERT_EQ(log_.size(), 3u);
  EXPECT_EQ(log_[2], "verifier math@2: half-open: the pause is over; one trial call decides");
  // half-open -> open
  EXPECT_TRUE(breaker_.Observe(true, "exit 2"));
  ASSERT_EQ(log_.size(), 4u);
  EXPECT_THAT(log_[3], StartsWith("verifier math@2: trial call failed: circuit open: math@2 "
                                  "failed 3 consecutive calls (last: exit 2); paused until "));
  EXPECT_THAT(breaker_.Admit(), StartsWith("circuit open: "));
  // open -> half-open -> closed
  clock_.Advance(absl::Seconds(10));
  EXPECT_EQ(breaker_.Admit(), "");
  EXPECT_FALSE(breaker_.Observe(false, ""));
  ASSERT_EQ(log_.size(), 6u);
  EXPECT_EQ(log_[4], log_[2]);
  EXPECT_EQ(log_[5], "verifier math@2: recovered after 3 consecutive failed calls");
  // Closed again: good calls say nothing.
  EXPECT_EQ(breaker_.Admit(), "");
  EXPECT_FALSE(breaker_.Observe(false, ""));
  EXPECT_EQ(log_.size(), 6u);
}

TEST(Breaker, NeverOpensWithoutAThreshold) {
  env::testing::FakeEnv clock;
  std::vector<std::string> log;
  Breaker breaker("environment", "guess", 0, absl::Seconds(1), &clock,
                  [&log](const std::string& line) { log.push_back(line); });
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(breaker.Admit(), "");
    EXPECT_FALSE(breaker.Observe(true, "down"));
  }
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0], "environment guess: failing: down");
}

}  // namespace
}  // namespace trellis::plugin
