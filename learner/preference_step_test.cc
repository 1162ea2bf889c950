// Preference steps (DPO, IPO) of the local learner: micro-batching,
// ranking, evaluation without an update, bad pairs refused.

#include <cstdint>
#include <random>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "learner/testing/small_job.h"

namespace trellis::learner {
namespace {

v1::PreferenceBatch RandomPairs(int pairs, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int lo, int hi) { return lo + static_cast<int>(rng() % (hi - lo + 1)); };
  v1::PreferenceBatch batch;
  for (int i = 0; i < pairs; ++i) {
    v1::PreferencePair* p = batch.add_pairs();
    for (int k = uniform(2, 5); k > 0; --k) p->add_prompt_tokens(uniform(3, kVocab - 1));
    for (int k = uniform(1, 5); k > 0; --k) p->add_chosen_tokens(uniform(3, kVocab - 1));
    for (int k = uniform(1, 5); k > 0; --k) p->add_rejected_tokens(uniform(3, kVocab - 1));
    p->set_ref_chosen_logprob(-2.0 * p->chosen_tokens_size());
    p->set_ref_rejected_logprob(-2.0 * p->rejected_tokens_size());
  }
  return batch;
}

TEST(LocalLearnerTest, PreferenceStepIsIndependentOfMicroBatchSize) {
  const v1::PreferenceBatch batch = RandomPairs(9, 4);
  for (const v1::DpoConfig::Loss loss : {v1::DpoConfig::SIGMOID, v1::DpoConfig::IPO}) {
    v1::JobConfig full_job = SmallJob(9, v1::TOKEN_MEAN), split_job = SmallJob(2, v1::TOKEN_MEAN);
    full_job.mutable_dpo()->set_loss(loss);
    split_job.mutable_dpo()->set_loss(loss);
    auto full = MakeLearner(full_job);
    auto split = MakeLearner(split_job);
    auto a = full->PreferenceStep(batch);
    auto b = split->PreferenceStep(batch);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    EXPECT_EQ(a->micro_batches(), 1);
    EXPECT_EQ(b->micro_batches(), 5);
    EXPECT_NEAR(a->loss(), b->loss(), 1e-6 * std::abs(a->loss())) << loss;
    EXPECT_NEAR(a->grad_norm(), b->grad_norm(), 1e-5 * a->grad_norm()) << loss;
    EXPECT_NEAR(a->reward_margin(), b->reward_margin(), 1e-6) << loss;
    EXPECT_EQ(a->preference_accuracy(), b->preference_accuracy()) << loss;
    EXPECT_EQ(a->policy_version(), 1);
  }
}

TEST(LocalLearnerTest, PreferenceStepsRankThePairsAndEvalDoesNotUpdate) {
  v1::JobConfig job = SmallJob(8, v1::TOKEN_MEAN);
  job.mutable_dpo()->set_beta(0.5);
  auto learner = MakeLearner(job);
  v1::PreferenceBatch batch = RandomPairs(8, 6);
  // The reference is the initial policy.
  auto ref = learner->EvalPreference(batch);
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_EQ(learner->policy_version(), 0);
  EXPECT_EQ(ref->micro_batches(), 1);
  v1::PreferenceBatch scored = batch;
  {
    // Per-pair reference sums from a model equal to the policy: margins 0.
    auto copy = MakeLearner(job);
    for (int i = 0; i < batch.pairs_size(); ++i) {
      v1::PreferenceBatch one;
      v1::PreferencePair* p = one.add_pairs();
      *p = batch.pairs(i);
      p->set_ref_chosen_logprob(0);
      p->set_ref_rejected_logprob(0);
      auto chosen = copy->EvalPreference(one);
      ASSERT_TRUE(chosen.ok());
      // With zero reference sums, chosen_reward = beta * log pi(chosen).
      scored.mutable_pairs(i)->set_ref_chosen_logprob(chosen->chosen_reward() / 0.5);
      scored.mutable_pairs(i)->set_ref_rejected_logprob(chosen->rejected_reward() / 0.5);
    }
  }
  auto before = learner->EvalPreference(scored);
  ASSERT_TRUE(before.ok());
  EXPECT_NEAR(before->reward_margin(), 0.0, 1e-5);
  EXPECT_NEAR(before->loss(), std::log(2.0), 1e-5);
  for (int step = 0; step < 20; ++step) ASSERT_TRUE(learner->PreferenceStep(scored).ok());
  auto after = learner->EvalPreference(scored);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->preference_accuracy(), 1.0);
  EXPECT_GT(after->reward_margin(), 0.5);
  EXPECT_LT(after->loss(), 0.5 * before->loss());
  EXPECT_GT(after->chosen_reward(), after->rejected_reward());
  EXPECT_EQ(learner->policy_version(), 20);

  v1::SftBatch sft;
  auto* pair = sft.add_pairs();
  pair->add_prompt_tokens(1);
  pair->add_target_tokens(5);
  auto e1 = learner->EvalSft(sft);
  auto e2 = learner->EvalSft(sft);
  ASSERT_TRUE(e1.ok() && e2.ok());
  EXPECT_EQ(e1->loss(), e2->loss());
  EXPECT_EQ(e1->trained_tokens(), 1);
  EXPECT_EQ(learner->policy_version(), 20);
}

TEST(LocalLearnerTest, RejectsAnEmptyPreferenceResponse) {
  auto learner = MakeLearner(SmallJob(4, v1::TOKEN_MEAN));
  v1::PreferenceBatch batch = RandomPairs(3, 2);
  batch.mutable_pairs(2)->clear_rejected_tokens();
  auto stats = learner->PreferenceStep(batch);
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(stats.status().message().find("preference pair 2"), std::string::npos)
      << stats.status();
  EXPECT_EQ(learner->policy_version(), 0);
}

}  // namespace
}  // namespace trellis::learner
