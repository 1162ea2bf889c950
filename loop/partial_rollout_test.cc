#include "loop/partial_rollout.h"

#include <vector>

#include "gtest/gtest.h"

namespace trellis::loop {
namespace {

constexpr int kGroup = 2;

data::Example Numbered(uint64_t id) {
  data::Example ex;
  ex.id = id;
  return ex;
}

// A response of `tokens` tokens, each of version `version`.
v1::Sample Response(uint64_t id, int index, int tokens, bool unfinished, int64_t version) {
  v1::Sample s;
  s.set_prompt_id(id);
  s.set_index(index);
  for (int t = 0; t < tokens; ++t) {
    s.add_response_tokens(5);
    s.add_logprobs(-1.0f);
  }
  s.set_unfinished(unfinished);
  s.set_policy_version(version);
  return s;
}

class PartialRolloutsTest : public ::testing::Test {
 protected:
  // `count` fresh groups, ids 0, 1, ...
  void Draw(PartialRollouts& partial, int count) {
    for (int i = 0; i < count; ++i) {
      CarriedGroup group;
      group.example = &examples_[drawn_];
      group.position = drawn_;
      group.prompt.set_id(examples_[drawn_].id);
      partial.Add(std::move(group));
      ++drawn_;
    }
  }
  v1::GenerateRequest Base() const {
    v1::GenerateRequest base;
    base.set_responses_per_prompt(kGroup);
    base.set_seed(77);
    return base;
  }

  std::vector<data::Example> examples_ = {Numbered(0), Numbered(1), Numbered(2), Numbered(3),
                                          Numbered(4), Numbered(5)};
  int drawn_ = 0;
};

TEST_F(PartialRolloutsTest, TrainsTheFirstFinishedGroupsAndCarriesTheRest) {
  PartialRollouts partial(v1::AsyncConfig::CONTINUE, 2, 1.0);
  EXPECT_EQ(partial.ToDraw(), 4);
  Draw(partial, 4);
  const v1::GenerateRequest request = partial.Request(Base());
  EXPECT_EQ(request.finish_prompts(), 2);
  ASSERT_EQ(request.prompts_size(), 4);
  v1::GenerateResponse response;
  const std::vector<bool> unfinished = {true, false, false, false};  // group 0 runs long
  for (int g = 0; g < 4; ++g) {
    for (int i = 0; i < kGroup; ++i) {
      *response.add_samples() = Response(g, i, 3, unfinished[g] && i == 0, 0);
    }
  }
  const PartialSplit split = partial.Split(request, response);
  ASSERT_EQ(split.examples.size(), 2u);
  EXPECT_EQ(split.examples[0]->id, 1u);
  EXPECT_EQ(split.examples[1]->id, 2u);
  EXPECT_EQ(split.rollout.samples_size(), 2 * kGroup);
  EXPECT_EQ(split.counts.groups_carried, 2);  // group 0 unfinished, group 3 finished
  EXPECT_EQ(partial.Positions(), (std::vector<uint64_t>{0, 3}));
  EXPECT_EQ(partial.ToDraw(), 2);
  // The next request resumes them with their responses and first seed.
  const v1::GenerateRequest next = partial.Request(Base());
  ASSERT_EQ(next.prompts_size(), 2);
  EXPECT_EQ(next.prompts(0).resume_size(), kGroup);
  EXPECT_TRUE(next.prompts(0).resume(0).unfinished());
  EXPECT_EQ(next.prompts(0).resume_seed(), 77u);
  // One finished group is not enough to skip the actors; a stale one
  // starts afresh.
  EXPECT_FALSE(partial.Finished(next).has_value());
  int64_t discarded = 0;
  EXPECT_EQ(partial.RestartOlderThan(1, &discarded), 2);
  EXPECT_EQ(discarded, 4 * 3);
  EXPECT_EQ(partial.Request(Base()).prompts(0).resume_size(), 0);
  EXPECT_EQ(partial.DropAll(), 2);
  EXPECT_EQ(partial.carried(), 0);
}

TEST_F(PartialRolloutsTest, RequeueRestartsUnfinishedGroupsButKeepsFinishedOnes) {
  PartialRollouts partial(v1::AsyncConfig::REQUEUE, 1, 2.0);
  Draw(partial, 3);
  const v1::GenerateRequest request = partial.Request(Base());
  v1::GenerateResponse response;
  for (int g = 0; g < 3; ++g) {
    for (int i = 0; i < kGroup; ++i) *response.add_samples() = Response(g, i, 4, g == 0, 0);
  }
  const PartialSplit split = partial.Split(request, response);
  ASSERT_EQ(split.examples.size(), 1u);
  EXPECT_EQ(split.examples[0]->id, 1u);
  EXPECT_EQ(split.counts.groups_restarted, 1);
  EXPECT_EQ(split.counts.tokens_discarded, kGroup * 4);
  EXPECT_EQ(split.counts.groups_carried, 1);  // the finished group beyond the batch
  const v1::GenerateRequest next = partial.Request(Base());
  EXPECT_EQ(next.prompts(0).resume_size(), 0);
  EXPECT_EQ(next.prompts(1).resume_size(), kGroup);
  // The finished group fills the next batch without generating.
  const std::optional<v1::GenerateResponse> finished = partial.Finished(next);
  ASSERT_TRUE(finished.has_value());
  const PartialSplit again = partial.Split(next, *finished);
  ASSERT_EQ(again.examples.size(), 1u);
  EXPECT_EQ(again.examples[0]->id, 2u);
  EXPECT_EQ(again.counts.groups_restarted, 0);  // group 0 had not begun again
}

TEST(PipelineLead, ContinueLeavesTheStalenessToTheCarriedResponses) {
  v1::AsyncConfig async;
  async.set_max_staleness(4);
  EXPECT_EQ(PipelineLead(async), 4);
  async.set_partial_rollout(v1::AsyncConfig::CONTINUE);
  EXPECT_EQ(PipelineLead(async), 1);
}

}  // namespace
}  // namespace trellis::loop
