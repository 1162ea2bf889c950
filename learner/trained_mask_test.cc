// Multi-turn samples (TrainSample.trained): the environment's tokens
// condition the policy's but are out of the loss, the gradient and the
// token counts; with PPO also out of the value loss, and a response ending
// with them keeps its reward (on the policy's last token).

#include <memory>

#include "gtest/gtest.h"
#include "learner/local_learner.h"
#include "model/testing/small_model.h"

namespace trellis::learner {
namespace {

constexpr int kVocab = 20;

v1::JobConfig Job(v1::LossAggregation aggregation) {
  v1::JobConfig job;
  *job.mutable_model() = model::testing::SmallConfig();
  job.mutable_grpo()->set_micro_batch_size(2);
  job.mutable_grpo()->set_loss_aggregation(aggregation);
  job.mutable_grpo()->set_kl_coef(0.05);
  return job;
}

// Two samples: a turn, an observation (untrained), a turn.
v1::TrainBatch MultiTurnBatch() {
  v1::TrainBatch batch;
  for (int i = 0; i < 2; ++i) {
    v1::TrainSample* s = batch.add_samples();
    for (int k = 0; k < 3; ++k) s->add_prompt_tokens(3 + k + i);
    const bool trained[] = {true, true, false, false, false, true, true};
    for (int k = 0; k < 7; ++k) {
      s->add_response_tokens(5 + (k * 3 + i) % 14);
      s->add_old_logprobs(trained[k] ? -2.5f + 0.1f * k : 0.0f);
      s->add_ref_logprobs(-2.7f + 0.05f * k);
      s->add_trained(trained[k]);
    }
    s->set_advantage(i == 0 ? 0.75f : -0.5f);
  }
  return batch;
}

v1::TrainStats Step(const v1::JobConfig& job, const v1::TrainBatch& batch) {
  LocalLearnerOptions options;
  options.vocab_size = kVocab;
  options.seed = 7;
  auto learner = NewLocalLearner(job, options, nullptr, nullptr);
  EXPECT_TRUE(learner.ok()) << learner.status();
  absl::StatusOr<v1::TrainStats> stats = (*learner)->TrainStep(batch);
  EXPECT_TRUE(stats.ok()) << stats.status();
  return stats.ok() ? *stats : v1::TrainStats();
}

// `batch` with its observation tokens' (positions 2-4) recorded log-probs
// changed.
v1::TrainBatch WithObservationLogprobsChanged(const v1::TrainBatch& batch) {
  v1::TrainBatch changed = batch;
  for (v1::TrainSample& s : *changed.mutable_samples()) {
    for (int k = 2; k <= 4; ++k) {
      s.set_old_logprobs(k, -0.01f * k);
      s.set_ref_logprobs(k, -9.0f);
    }
  }
  return changed;
}

class TrainedMaskTest : public testing::TestWithParam<v1::LossAggregation> {};

TEST_P(TrainedMaskTest, EnvironmentTokensDoNotReachTheLoss) {
  const v1::TrainBatch batch = MultiTurnBatch();
  const v1::TrainStats stats = Step(Job(GetParam()), batch);
  EXPECT_EQ(stats.trained_tokens(), 8);
  // An observation token's recorded log-probs change nothing.
  v1::TrainBatch changed = WithObservationLogprobsChanged(batch);
  const v1::TrainStats same = Step(Job(GetParam()), changed);
  EXPECT_EQ(same.loss(), stats.loss());
  EXPECT_EQ(same.grad_norm(), stats.grad_norm());
  EXPECT_EQ(same.kl(), stats.kl());
  // Trained, the same tokens change the loss.
  for (v1::TrainSample& s : *changed.mutable_samples()) s.clear_trained();
  const v1::TrainStats all = Step(Job(GetParam()), changed);
  EXPECT_EQ(all.trained_tokens(), 14);
  EXPECT_NE(all.loss(), stats.loss());
}

INSTANTIATE_TEST_SUITE_P(BothAggregations, TrainedMaskTest,
                         testing::Values(v1::TOKEN_MEAN, v1::SEQUENCE_MEAN));

v1::JobConfig PpoJob(v1::PpoConfig::Critic critic) {
  v1::JobConfig job = Job(v1::TOKEN_MEAN);
  job.set_algorithm("ppo");
  job.mutable_ppo()->set_critic(critic);
  return job;
}

// MultiTurnBatch scored as PPO's rollouts are: a reward per sample.
v1::TrainBatch PpoBatch(float reward0, float reward1) {
  v1::TrainBatch batch = MultiTurnBatch();
  batch.mutable_samples(0)->set_reward(reward0);
  batch.mutable_samples(1)->set_reward(reward1);
  for (v1::TrainSample& s : *batch.mutable_samples()) s.clear_advantage();
  return batch;
}

class PpoTrainedMaskTest : public testing::TestWithParam<v1::PpoConfig::Critic> {};

// The policy term, the KL and the critic's value loss see the policy's
// tokens only (GAE skips the observation: learner/losses_test.cc).
TEST_P(PpoTrainedMaskTest, EnvironmentTokensDoNotReachThePolicyOrValueLoss) {
  const v1::JobConfig job = PpoJob(GetParam());
  const v1::TrainBatch batch = PpoBatch(1.0f, -0.5f);
  const v1::TrainStats stats = Step(job, batch);
  EXPECT_EQ(stats.trained_tokens(), 8);
  v1::TrainBatch changed = WithObservationLogprobsChanged(batch);
  const v1::TrainStats same = Step(job, changed);
  EXPECT_EQ(same.loss(), stats.loss());
  EXPECT_EQ(same.value_loss(), stats.value_loss());
  EXPECT_EQ(same.grad_norm(), stats.grad_norm());
  EXPECT_EQ(same.kl(), stats.kl());
  for (v1::TrainSample& s : *changed.mutable_samples()) s.clear_trained();
  const v1::TrainStats all = Step(job, changed);
  EXPECT_EQ(all.trained_tokens(), 14);
  EXPECT_NE(all.loss(), stats.loss());
}

// An episode cut at the token limit ends with environment tokens: its
// reward still reaches the policy's tokens (its last one), so it trains.
TEST_P(PpoTrainedMaskTest, AResponseEndingWithEnvironmentTokensKeepsItsReward) {
  const v1::JobConfig job = PpoJob(GetParam());
  auto ending_untrained = [](float reward0) {
    v1::TrainBatch batch = PpoBatch(reward0, 0.0f);
    v1::TrainSample* s = batch.mutable_samples(0);
    s->set_trained(5, false);
    s->set_trained(6, false);
    s->set_old_logprobs(5, 0);
    s->set_old_logprobs(6, 0);
    return batch;
  };
  const v1::TrainStats rewarded = Step(job, ending_untrained(1.0f));
  const v1::TrainStats unrewarded = Step(job, ending_untrained(0.0f));
  EXPECT_EQ(rewarded.trained_tokens(), 6);
  EXPECT_NE(rewarded.value_loss(), unrewarded.value_loss());
  EXPECT_NE(rewarded.loss(), unrewarded.loss());
}

INSTANTIATE_TEST_SUITE_P(BothCritics, PpoTrainedMaskTest,
                         testing::Values(v1::PpoConfig::SHARED, v1::PpoConfig::SEPARATE));

TEST(TrainedMaskTest, FlagsMustMatchTheResponse) {
  v1::TrainBatch batch = MultiTurnBatch();
  batch.mutable_samples(1)->add_trained(true);
  LocalLearnerOptions options;
  options.vocab_size = kVocab;
  auto learner = NewLocalLearner(Job(v1::TOKEN_MEAN), options, nullptr, nullptr);
  ASSERT_TRUE(learner.ok()) << learner.status();
  const absl::Status s = (*learner)->TrainStep(batch).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("train sample 1 has 7 response tokens and 8 trained flags"),
            std::string::npos)
      << s;
}

}  // namespace
}  // namespace trellis::learner
