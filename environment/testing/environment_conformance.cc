#include "environment/testing/environment_conformance.h"

#include <cmath>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"

namespace trellis::environment::conformance {
namespace {

// What an episode showed: each observation, reward and done, in order.
struct Transcript {
  std::vector<std::string> observations;
  std::vector<float> rewards;
  bool done = false;
  bool operator==(const Transcript& o) const {
    return observations == o.observations && rewards == o.rewards && done == o.done;
  }
};

// Runs one episode to its end and closes it; non-OK at the first failed
// call.
absl::StatusOr<Transcript> RunEpisode(Environment& env, const EnvironmentCase& c,
                                      const std::string& id, uint64_t seed) {
  v1::OpenEpisodeRequest open = c.item;
  open.set_episode_id(id);
  open.set_seed(seed);
  absl::StatusOr<v1::OpenEpisodeResponse> opened = env.Open(open);
  if (!opened.ok()) return opened.status();
  Transcript t;
  t.observations.push_back(opened->observation());
  Policy policy = c.policy();
  for (int turn = 0; turn < c.max_turns && !t.done; ++turn) {
    v1::EnvironmentStepRequest step;
    step.set_episode_id(id);
    step.set_turn(turn);
    step.set_action(policy(t.observations.back()));
    absl::StatusOr<v1::EnvironmentStepResponse> r = env.Step(step);
    if (!r.ok()) return r.status();
    t.observations.push_back(r->observation());
    t.rewards.push_back(r->reward());
    t.done = r->done();
  }
  v1::CloseEpisodeRequest close;
  close.set_episode_id(id);
  if (absl::Status s = env.Close(close); !s.ok()) return s;
  return t;
}

}  // namespace

std::string EnvironmentCaseName(const ::testing::TestParamInfo<EnvironmentCase>& info) {
  return info.param.name;
}

void EnvironmentConformanceTest::SetUp() {
  absl::StatusOr<std::unique_ptr<Environment>> made = GetParam().make();
  ASSERT_TRUE(made.ok()) << made.status();
  env_ = *std::move(made);
}

TEST_P(EnvironmentConformanceTest, AnEpisodeOpensStepsToDoneAndCloses) {
  absl::StatusOr<Transcript> t = RunEpisode(env(), GetParam(), "e-1", 11);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->done) << "not done after " << GetParam().max_turns << " actions";
  float total = 0;
  for (float r : t->rewards) {
    EXPECT_TRUE(std::isfinite(r));
    total += r;
  }
  EXPECT_GT(total, 0) << "the case's policy should earn a reward";
}

TEST_P(EnvironmentConformanceTest, AClosedEpisodeIsGone) {
  ASSERT_TRUE(RunEpisode(env(), GetParam(), "e-2", 3).ok());
  v1::EnvironmentStepRequest step;
  step.set_episode_id("e-2");
  step.set_action("1");
  EXPECT_EQ(env().Step(step).status().code(), absl::StatusCode::kNotFound);
  v1::CloseEpisodeRequest close;
  close.set_episode_id("e-2");
  EXPECT_TRUE(env().Close(close).ok()) << "closing twice is harmless";
}

TEST_P(EnvironmentConformanceTest, AnEpisodeNeverOpenedIsNotFound) {
  v1::EnvironmentStepRequest step;
  step.set_episode_id("never-opened");
  step.set_action("1");
  EXPECT_EQ(env().Step(step).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(EnvironmentConformanceTest, EqualSeedsAndActionsGiveEqualEpisodes) {
  absl::StatusOr<Transcript> a = RunEpisode(env(), GetParam(), "a", 42);
  absl::StatusOr<Transcript> b = RunEpisode(env(), GetParam(), "b", 42);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->observations, b->observations);
  EXPECT_EQ(a->rewards, b->rewards);
}

TEST_P(EnvironmentConformanceTest, ConcurrentEpisodesGoAsTheyWouldAlone) {
  constexpr int kEpisodes = 6;
  std::vector<absl::StatusOr<Transcript>> alone;
  for (int i = 0; i < kEpisodes; ++i) {
    alone.push_back(RunEpisode(env(), GetParam(), absl::StrCat("alone-", i), 100 + i));
  }
  std::vector<absl::StatusOr<Transcript>> together(kEpisodes, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < kEpisodes; ++i) {
    threads.emplace_back([&, i] {
      together[i] = RunEpisode(env(), GetParam(), absl::StrCat("together-", i), 100 + i);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kEpisodes; ++i) {
    ASSERT_TRUE(alone[i].ok()) << alone[i].status();
    ASSERT_TRUE(together[i].ok()) << together[i].status();
    EXPECT_TRUE(*alone[i] == *together[i]) << "episode " << i;
  }
}

}  // namespace trellis::environment::conformance
