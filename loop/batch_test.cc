#include "loop/batch.h"

#include "gtest/gtest.h"
#include "loop/testing/fake_roles.h"

namespace trellis::loop {
namespace {

// A step's samples and verdicts from the fake actor and verifier: two
// prompts, four responses each (even ones right, odd ones wrong).
struct Drawn {
  v1::GenerateResponse rollout;
  v1::VerifyResponse verdicts;
  std::vector<float> rewards;
};

Drawn Draw(testing::FakeActor& actor, testing::FakeVerifier& verifier) {
  v1::GenerateRequest request;
  request.set_responses_per_prompt(4);
  for (int p = 0; p < 2; ++p) {
    v1::Prompt* prompt = request.add_prompts();
    prompt->set_id(p);
    prompt->set_answer(std::to_string(p));
    prompt->add_token_ids(1);
  }
  Drawn d;
  d.rollout = *actor.Generate(request);
  v1::VerifyRequest verify;
  for (const v1::Sample& s : d.rollout.samples()) {
    v1::VerifyItem* item = verify.add_items();
    item->set_response(s.response_text());
    item->set_answer(request.prompts(s.prompt_id()).answer());
  }
  d.verdicts = *verifier.Verify(verify);
  for (const auto& r : d.verdicts.results()) d.rewards.push_back(r.reward());
  return d;
}

BatchInput Input(const Drawn& d) {
  BatchInput in;
  in.samples = &d.rollout.samples();
  in.verdicts = &d.verdicts;
  in.group = 4;
  in.rewards = d.rewards;
  in.dropped.assign(d.rewards.size(), false);
  return in;
}

TEST(AssembleBatchTest, EstimatorAdvantagesAndRewardsTravelWithEachSample) {
  testing::FakeActor actor;
  testing::FakeVerifier verifier;
  const Drawn d = Draw(actor, verifier);
  learner::GroupAdvantages adv;
  adv.advantages = {1, -1, 1, -1, 0, 0, 0, 0};
  adv.zero_variance = {false, true};
  BatchInput in = Input(d);
  in.advantages = &adv;
  ledger::StepCounts counts;
  const v1::TrainBatch batch = AssembleBatch(in, &counts);
  ASSERT_EQ(batch.samples_size(), 8);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(batch.samples(i).advantage(), adv.advantages[i]);
    EXPECT_EQ(batch.samples(i).reward(), d.rewards[i]);
    EXPECT_EQ(batch.samples(i).old_logprobs_size(), 2);
    EXPECT_EQ(batch.samples(i).ref_logprobs_size(), 0);  // no reference given
  }
  EXPECT_EQ(counts.samples_effective, 4);
  EXPECT_EQ(counts.samples_zero_variance, 4);
  EXPECT_DOUBLE_EQ(counts.mean_reward, 0.5);
  EXPECT_DOUBLE_EQ(counts.accuracy, 0.5);
}

TEST(AssembleBatchTest, WithoutAnEstimatorNoSampleCarriesAnAdvantage) {
  testing::FakeActor actor;
  testing::FakeVerifier verifier;
  testing::FakeReference reference;
  const Drawn d = Draw(actor, verifier);
  v1::LogProbRequest scored;
  *scored.mutable_samples() = d.rollout.samples();
  const v1::LogProbResponse ref = *reference.LogProbs(scored);
  BatchInput in = Input(d);
  in.reference = &ref;
  ledger::StepCounts counts;
  const v1::TrainBatch batch = AssembleBatch(in, &counts);
  ASSERT_EQ(batch.samples_size(), 8);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(batch.samples(i).advantage(), 0);  // unset
    EXPECT_EQ(batch.samples(i).reward(), d.rewards[i]);
    EXPECT_EQ(batch.samples(i).ref_logprobs_size(), 2);
  }
  EXPECT_EQ(counts.samples_effective, 8);  // every response trains
  EXPECT_EQ(counts.samples_zero_variance, 0);
}

TEST(AssembleBatchTest, DroppedTimeoutsLeaveTheBatchAndTheMeans) {
  testing::FakeActor actor;
  testing::FakeVerifier verifier;
  verifier.time_out_wrong = true;
  const Drawn d = Draw(actor, verifier);
  BatchInput in = Input(d);
  in.dropped = DroppedSamples(d.verdicts, /*drop_timeouts=*/true);
  EXPECT_EQ(in.dropped, std::vector<bool>({false, true, false, true, false, true, false, true}));
  EXPECT_EQ(DroppedSamples(d.verdicts, false), std::vector<bool>(8, false));
  learner::GroupAdvantages adv;
  adv.advantages.assign(8, 0);
  adv.zero_variance = {true, true};
  in.advantages = &adv;
  ledger::StepCounts counts;
  const v1::TrainBatch batch = AssembleBatch(in, &counts);
  EXPECT_EQ(batch.samples_size(), 4);
  EXPECT_EQ(counts.samples_dropped, 4);
  EXPECT_EQ(counts.samples_timeout, 0);  // the TIMEOUTs were dropped, not trained
  EXPECT_DOUBLE_EQ(counts.mean_reward, 1);
  EXPECT_DOUBLE_EQ(counts.accuracy, 1);
}

// A dead verifier gives every sample ERROR and the same reward, so every
// group is without a gradient: the samples count as errors, the cause.
TEST(AssembleBatchTest, ADeadVerifiersSamplesCountAsErrorsNotZeroVariance) {
  testing::FakeActor actor;
  testing::FakeVerifier verifier;
  Drawn d = Draw(actor, verifier);
  for (int i = 0; i < d.verdicts.results_size(); ++i) {
    d.verdicts.mutable_results(i)->set_verdict(i < 6 ? v1::ERROR : v1::TIMEOUT);
    d.rewards[i] = 0;
  }
  learner::GroupAdvantages adv;
  adv.advantages.assign(8, 0);
  adv.zero_variance = {true, true};
  BatchInput in = Input(d);
  in.advantages = &adv;
  ledger::StepCounts counts;
  (void)AssembleBatch(in, &counts);
  EXPECT_EQ(counts.samples_error, 6);
  EXPECT_EQ(counts.samples_timeout, 2);
  EXPECT_EQ(counts.samples_zero_variance, 0);

  ledger::StepCounts left_out;
  CountNoGradient(v1::ERROR, &left_out);
  CountNoGradient(v1::WRONG, &left_out);
  EXPECT_EQ(left_out.samples_error, 1);
  EXPECT_EQ(left_out.samples_zero_variance, 1);
}

TEST(AssembleBatchTest, OverlongFilteringLeavesTruncatedResponsesOut) {
  testing::FakeActor actor;
  actor.truncate_odd = true;
  testing::FakeVerifier verifier;
  const Drawn d = Draw(actor, verifier);
  learner::GroupAdvantages adv;
  adv.advantages = {1, -1, 1, -1, 1, -1, 1, -1};
  adv.zero_variance = {false, false};
  BatchInput in = Input(d);
  in.advantages = &adv;
  ledger::StepCounts counts;
  EXPECT_EQ(AssembleBatch(in, &counts).samples_size(), 8);
  EXPECT_EQ(counts.samples_truncated, 4);
  EXPECT_EQ(counts.samples_overlong, 0);
  in.overlong_filtering = true;
  counts = ledger::StepCounts();
  EXPECT_EQ(AssembleBatch(in, &counts).samples_size(), 4);
  EXPECT_EQ(counts.samples_truncated, 4);
  EXPECT_EQ(counts.samples_overlong, 4);
  EXPECT_EQ(counts.samples_effective, 4);
}

TEST(AssembleBatchTest, CountsEachSamplesStalenessAndTheTrainedPrompts) {
  testing::FakeActor actor;
  testing::FakeVerifier verifier;
  Drawn d = Draw(actor, verifier);
  // Prompt 0's samples came from version 3, prompt 1's from version 5.
  for (v1::Sample& s : *d.rollout.mutable_samples()) {
    s.set_policy_version(s.prompt_id() == 0 ? 3 : 5);
  }
  BatchInput in = Input(d);
  in.learner_version = 5;
  // Every sample of prompt 1 left out: it trains nothing.
  for (int i = 4; i < 8; ++i) in.dropped[i] = true;
  ledger::StepCounts counts;
  const v1::TrainBatch batch = AssembleBatch(in, &counts);
  ASSERT_EQ(batch.samples_size(), 4);
  EXPECT_EQ(counts.staleness, (std::vector<int64_t>{0, 0, 4}));
  EXPECT_EQ(counts.prompt_ids, (std::vector<uint64_t>{0}));
}

}  // namespace
}  // namespace trellis::loop
