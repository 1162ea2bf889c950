#include "learner/local_learner.h"

#include <filesystem>
#include <string>

#include "config/choice.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "learner/objectives.h"
#include "learner/testing/small_job.h"
#include "ledger/ledger.h"
#include "ledger/memory_tracker.h"
#include "model/safetensors.h"
#include "model/token_batch.h"
#include "model/transformer.h"

namespace trellis::learner {
namespace {

using ::testing::HasSubstr;

// A fresh learner of `job` restored from a checkpoint of `running`, written
// to TempDir()/`name`.
std::unique_ptr<LearnerWorker> Restored(const v1::JobConfig& job, LearnerWorker& running,
                                        const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(running.SaveCheckpoint(dir).ok());
  auto restored = MakeLearner(job);
  absl::Status s = restored->RestoreCheckpoint(dir);
  EXPECT_TRUE(s.ok()) << s;
  return restored;
}

// Both learners take `steps` steps on `batch` with identical results.
void ExpectSameSteps(LearnerWorker& a, LearnerWorker& b, const v1::TrainBatch& batch,
                     int steps) {
  for (int step = 0; step < steps; ++step) {
    auto sa = a.TrainStep(batch);
    auto sb = b.TrainStep(batch);
    ASSERT_TRUE(sa.ok() && sb.ok());
    EXPECT_EQ(sa->loss(), sb->loss()) << "step " << step;
    EXPECT_EQ(sa->value_loss(), sb->value_loss()) << "step " << step;
    EXPECT_EQ(sa->grad_norm(), sb->grad_norm()) << "step " << step;
  }
}

// The gradient summed over micro-batches equals the full-batch gradient.
class AccumulationTest : public testing::TestWithParam<v1::LossAggregation> {};

TEST_P(AccumulationTest, MicroBatchGradientsEqualFullBatchGradient) {
  const v1::LossAggregation aggregation = GetParam();
  const v1::JobConfig job = SmallJob(1, aggregation);
  torch::manual_seed(3);
  model::Transformer model(job.model(), kVocab);
  const v1::TrainBatch batch = RandomBatch(10, 11);

  double tokens = 0;
  for (const auto& s : batch.samples()) tokens += s.response_tokens_size();
  const double normalizer = LossNormalizer(aggregation, tokens, batch.samples_size());
  auto gradient = [&](int micro) {
    model->zero_grad();
    for (int begin = 0; begin < batch.samples_size(); begin += micro) {
      const int end = std::min(batch.samples_size(), begin + micro);
      std::vector<model::SequencePair> pairs;
      std::vector<absl::Span<const float>> old_rows, ref_rows;
      std::vector<float> adv;
      for (int i = begin; i < end; ++i) {
        const auto& s = batch.samples(i);
        pairs.push_back({s.prompt_tokens(), s.response_tokens()});
        old_rows.emplace_back(s.old_logprobs());
        ref_rows.emplace_back(s.ref_logprobs());
        adv.push_back(s.advantage());
      }
      auto tb = model::MakeTokenBatch(pairs, 0, 16);
      EXPECT_TRUE(tb.ok());
      PolicyLoss loss = GrpoLoss(model::TargetLogProbs(model, *tb),
                                 model::PlaceResponseValues(old_rows, *tb),
                                 model::PlaceResponseValues(ref_rows, *tb),
                                 torch::tensor(adv), tb->response_mask, 0.2, 0.05,
                                 aggregation, normalizer);
      loss.loss.backward();
    }
    std::vector<torch::Tensor> grads;
    for (const auto& p : model->parameters()) grads.push_back(p.grad().flatten().clone());
    return torch::cat(grads);
  };
  const torch::Tensor full = gradient(10).to(torch::kFloat64);
  for (int micro : {1, 3, 4}) {
    const torch::Tensor accumulated = gradient(micro).to(torch::kFloat64);
    const double rel = ((accumulated - full).norm() / full.norm()).item<double>();
    EXPECT_LT(rel, 1e-5) << "micro-batch " << micro;
  }
}

INSTANTIATE_TEST_SUITE_P(BothAggregations, AccumulationTest,
                         testing::Values(v1::TOKEN_MEAN, v1::SEQUENCE_MEAN));

TEST(LocalLearnerTest, StepIsIndependentOfMicroBatchSize) {
  const v1::TrainBatch batch = RandomBatch(12, 5);
  for (v1::LossAggregation aggregation : {v1::TOKEN_MEAN, v1::SEQUENCE_MEAN}) {
    auto full = MakeLearner(SmallJob(12, aggregation));
    auto split = MakeLearner(SmallJob(5, aggregation));
    auto a = full->TrainStep(batch);
    auto b = split->TrainStep(batch);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->micro_batches(), 1);
    EXPECT_EQ(b->micro_batches(), 3);
    EXPECT_NEAR(a->loss(), b->loss(), 1e-5 * std::abs(a->loss()) + 1e-7);
    EXPECT_NEAR(a->grad_norm(), b->grad_norm(), 1e-5 * a->grad_norm());
    EXPECT_EQ(a->policy_version(), 1);
  }
}

TEST(LocalLearnerTest, ActivationsGrowWithMicroBatchButStateDoesNot) {
  ledger::MemoryTracker::Install();
  const v1::TrainBatch batch = RandomBatch(16, 9);
  auto small = MakeLearner(SmallJob(4, v1::TOKEN_MEAN));
  auto large = MakeLearner(SmallJob(8, v1::TOKEN_MEAN));
  auto a = small->TrainStep(batch);
  auto b = large->TrainStep(batch);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_GT(a->activation_bytes(), 0);
  EXPECT_GT(b->activation_bytes(), a->activation_bytes() * 3 / 2);
  EXPECT_EQ(a->parameter_bytes(), b->parameter_bytes());
  EXPECT_EQ(a->gradient_bytes(), b->gradient_bytes());
  EXPECT_EQ(a->optimizer_state_bytes(), b->optimizer_state_bytes());
  EXPECT_EQ(a->optimizer_state_bytes(), 2 * a->parameter_bytes());
}

TEST(LocalLearnerTest, SftReportsTeacherForcedExactMatch) {
  v1::JobConfig job = SmallJob(8, v1::TOKEN_MEAN);
  job.mutable_sft()->mutable_optimizer()->set_lr(0.01);
  auto learner = MakeLearner(job);
  v1::SftBatch batch;
  for (int i = 0; i < 4; ++i) {
    auto* pair = batch.add_pairs();
    for (int t : {1, 3 + i}) pair->add_prompt_tokens(t);
    for (int t : {10 + i, 2}) pair->add_target_tokens(t);
  }
  double first = -1, last = -1;
  for (int step = 0; step < 60 && last < 1.0; ++step) {
    auto stats = learner->SftStep(batch);
    ASSERT_TRUE(stats.ok()) << stats.status();
    if (first < 0) first = stats->sequence_accuracy();
    last = stats->sequence_accuracy();
  }
  // An untrained model gets (almost) none right; memorizing four pairs gets
  // every row exact.
  EXPECT_LE(first, 0.25);
  EXPECT_DOUBLE_EQ(last, 1.0);
}

// A chat's user turns between assistant turns are targets that only
// condition: the loss counts the trained tokens alone, and flags that do not
// match the targets are refused.
TEST(LocalLearnerTest, SftTrainsOnlyTheFlaggedTargets) {
  v1::SftBatch batch;
  auto* pair = batch.add_pairs();
  for (int t : {1, 3}) pair->add_prompt_tokens(t);
  for (int t : {10, 11, 12, 2}) pair->add_target_tokens(t);
  absl::StatusOr<v1::TrainStats> all = MakeLearner(SmallJob(8, v1::TOKEN_MEAN))->SftStep(batch);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->trained_tokens(), 4);
  for (bool t : {true, false, false, true}) pair->add_trained(t);
  absl::StatusOr<v1::TrainStats> some = MakeLearner(SmallJob(8, v1::TOKEN_MEAN))->SftStep(batch);
  ASSERT_TRUE(some.ok()) << some.status();
  EXPECT_EQ(some->trained_tokens(), 2);
  EXPECT_NE(some->loss(), all->loss());
  pair->add_trained(true);
  absl::Status s = MakeLearner(SmallJob(8, v1::TOKEN_MEAN))->SftStep(batch).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("5 trained flags for 4 target tokens"));
}

TEST(LocalLearnerTest, RejectsMismatchedLogProbs) {
  auto learner = MakeLearner(SmallJob(4, v1::TOKEN_MEAN));
  v1::TrainBatch batch = RandomBatch(3, 1);
  batch.mutable_samples(1)->add_old_logprobs(-1.0f);
  auto stats = learner->TrainStep(batch);
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(stats.status().message().find("train sample 1"), std::string::npos)
      << stats.status();
  EXPECT_EQ(learner->policy_version(), 0);
}


v1::JobConfig PpoJob(int micro_batch, v1::PpoConfig::Critic critic) {
  v1::JobConfig job = SmallJob(micro_batch, v1::TOKEN_MEAN);
  job.set_algorithm("ppo");
  job.mutable_ppo()->set_critic(critic);
  return job;
}

v1::TrainBatch WithRewards(v1::TrainBatch batch) {
  for (int i = 0; i < batch.samples_size(); ++i) {
    batch.mutable_samples(i)->set_reward(static_cast<float>(i % 3) - 1.0f);
  }
  return batch;
}

// PPO: the critic's values, GAE and the whitening are computed over the
// whole batch before the update, so the step does not depend on how it is
// split; the critic learns too.
TEST(LocalLearnerPpoTest, StepIsIndependentOfMicroBatchSize) {
  const v1::TrainBatch batch = WithRewards(RandomBatch(12, 9));
  for (const v1::PpoConfig::Critic critic : {v1::PpoConfig::SEPARATE, v1::PpoConfig::SHARED}) {
    auto full = MakeLearner(PpoJob(12, critic));
    auto split = MakeLearner(PpoJob(5, critic));
    auto a = full->TrainStep(batch);
    auto b = split->TrainStep(batch);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_NEAR(a->loss(), b->loss(), 1e-5 * std::abs(a->loss()) + 1e-6) << critic;
    EXPECT_NEAR(a->value_loss(), b->value_loss(), 1e-5 * a->value_loss()) << critic;
    EXPECT_NEAR(a->grad_norm(), b->grad_norm(), 1e-4 * a->grad_norm()) << critic;
    EXPECT_GT(a->value_loss(), 0) << critic;
    // The value loss falls when the critic sees the same batch again.
    auto again = full->TrainStep(batch);
    ASSERT_TRUE(again.ok());
    EXPECT_LT(again->value_loss(), a->value_loss()) << critic;
  }
}

// The critic (weights and optimizer) goes through a checkpoint: a restored
// learner takes the same next step as the one that kept running.
TEST(LocalLearnerPpoTest, CheckpointHoldsTheCritic) {
  const v1::TrainBatch batch = WithRewards(RandomBatch(8, 3));
  for (const v1::PpoConfig::Critic critic : {v1::PpoConfig::SEPARATE, v1::PpoConfig::SHARED}) {
    const std::string dir = ::testing::TempDir() + "/ppo_ckpt_" + config::ChoiceName(critic);
    std::filesystem::create_directories(dir);
    auto running = MakeLearner(PpoJob(8, critic));
    ASSERT_TRUE(running->TrainStep(batch).ok());
    ASSERT_TRUE(running->SaveCheckpoint(dir).ok());
    EXPECT_TRUE(std::filesystem::exists(dir + "/critic.safetensors"));
    auto restored = MakeLearner(PpoJob(8, critic));
    absl::Status s = restored->RestoreCheckpoint(dir);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(restored->policy_version(), 1);
    auto a = running->TrainStep(batch);
    auto b = restored->TrainStep(batch);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->loss(), b->loss()) << critic;
    EXPECT_EQ(a->value_loss(), b->value_loss()) << critic;

    // A checkpoint of the other kind of critic does not fit: refused,
    // naming the file.
    auto other = MakeLearner(PpoJob(8, critic == v1::PpoConfig::SHARED ? v1::PpoConfig::SEPARATE
                                                                   : v1::PpoConfig::SHARED));
    absl::Status refused = other->RestoreCheckpoint(dir);
    EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
    EXPECT_NE(std::string(refused.message()).find(".safetensors"), std::string::npos)
        << refused;
  }
}

// bf16 keeps fp32 masters: a checkpoint holds them (not the rounded bf16
// weights), so a restored learner continues exactly; PPO's critic too.
TEST(LocalLearnerTest, Bf16CheckpointHoldsTheMasters) {
  const v1::TrainBatch batch = WithRewards(RandomBatch(8, 5));
  v1::JobConfig job = PpoJob(8, v1::PpoConfig::SEPARATE);
  job.mutable_memory()->set_precision(v1::MemoryConfig::BF16);
  auto running = MakeLearner(job);
  auto first = running->TrainStep(batch);
  ASSERT_TRUE(first.ok()) << first.status();
  // fp32 masters of the bf16 policy (and of the critic).
  EXPECT_GE(first->master_weight_bytes(), 2 * first->parameter_bytes());
  auto restored = Restored(job, *running, "bf16_ckpt");
  absl::StatusOr<model::NamedTensors> saved =
      model::LoadSafetensors(::testing::TempDir() + "/bf16_ckpt/weights.safetensors");
  ASSERT_TRUE(saved.ok()) << saved.status();
  for (const auto& [name, tensor] : *saved) EXPECT_EQ(tensor.scalar_type(), torch::kFloat32);
  ExpectSameSteps(*running, *restored, batch, 2);
}

// SGD keeps no state without momentum and one buffer per parameter with it;
// the momentum goes through a checkpoint, and a checkpoint of another
// optimizer is refused.
TEST(LocalLearnerTest, SgdStateAndCheckpoint) {
  const v1::TrainBatch batch = RandomBatch(8, 11);
  v1::JobConfig plain = SmallJob(8, v1::TOKEN_MEAN);
  plain.mutable_grpo()->mutable_optimizer()->set_name(v1::OptimizerConfig::SGD);
  auto stateless = MakeLearner(plain)->TrainStep(batch);
  ASSERT_TRUE(stateless.ok()) << stateless.status();
  EXPECT_EQ(stateless->optimizer_state_bytes(), 0);

  v1::JobConfig momentum = plain;
  momentum.mutable_grpo()->mutable_optimizer()->set_momentum(0.9);
  auto running = MakeLearner(momentum);
  auto first = running->TrainStep(batch);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->optimizer_state_bytes(), first->parameter_bytes());
  auto restored = Restored(momentum, *running, "sgd_ckpt");
  // The third step's loss depends on the second update, which uses the
  // momentum buffers.
  ExpectSameSteps(*running, *restored, batch, 2);
  const std::string dir = ::testing::TempDir() + "/sgd_ckpt";

  auto adamw = MakeLearner(SmallJob(8, v1::TOKEN_MEAN));
  absl::Status refused = adamw->RestoreCheckpoint(dir);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_NE(std::string(refused.message()).find("\"sgd\""), std::string::npos) << refused;
}

}  // namespace
}  // namespace trellis::learner
