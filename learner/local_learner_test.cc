#include "learner/local_learner.h"

#include <atomic>
#include <filesystem>
#include <map>
#include <random>
#include <thread>
#include <variant>

#include "absl/strings/str_cat.h"
#include "comm/tcp_store.h"
#include "config/choice.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "learner/objectives.h"
#include "ledger/ledger.h"
#include "ledger/memory_tracker.h"
#include "model/safetensors.h"
#include "model/token_batch.h"
#include "model/transformer.h"

namespace trellis::learner {
namespace {

using ::testing::HasSubstr;

v1::JobConfig SmallJob(int micro_batch, v1::LossAggregation aggregation) {
  v1::JobConfig job;
  auto* m = job.mutable_model();
  m->set_d_model(32);
  m->set_n_layers(2);
  m->set_n_heads(4);
  m->set_n_kv_heads(2);
  m->set_d_ff(64);
  m->set_max_seq_len(16);
  job.mutable_grpo()->set_micro_batch_size(micro_batch);
  job.mutable_grpo()->set_loss_aggregation(aggregation);
  job.mutable_grpo()->set_kl_coef(0.05);
  return job;
}

constexpr int kVocab = 20;

v1::TrainBatch RandomBatch(int rows, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int lo, int hi) { return lo + static_cast<int>(rng() % (hi - lo + 1)); };
  v1::TrainBatch batch;
  for (int i = 0; i < rows; ++i) {
    v1::TrainSample* s = batch.add_samples();
    const int np = uniform(2, 5), nr = uniform(1, 6);
    for (int k = 0; k < np; ++k) s->add_prompt_tokens(uniform(3, kVocab - 1));
    for (int k = 0; k < nr; ++k) {
      s->add_response_tokens(uniform(3, kVocab - 1));
      s->add_old_logprobs(-3.0f + 0.1f * uniform(0, 10));
      s->add_ref_logprobs(-3.0f + 0.1f * uniform(0, 10));
    }
    s->set_advantage(0.25f * uniform(-4, 4));
  }
  return batch;
}

std::unique_ptr<LearnerWorker> MakeLearner(const v1::JobConfig& job) {
  LocalLearnerOptions options;
  options.vocab_size = kVocab;
  options.seed = 7;
  auto learner = NewLocalLearner(job, options, /*transport=*/nullptr, /*ledger=*/nullptr);
  EXPECT_TRUE(learner.ok()) << learner.status();
  return *std::move(learner);
}

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

// A data-parallel group of `ranks` learners as threads of this process,
// each running `steps` TrainSteps on the same batches.
struct GroupRun {
  std::vector<std::vector<v1::TrainStats>> stats;  // [rank][step]
  std::vector<model::NamedTensors> weights;        // [rank], after the steps
  std::vector<std::map<std::string, int64_t>> ledger;  // [rank]: last bytes by object
};

// Each rank then saves a checkpoint into dir/ckpt<ranks> and, once every
// rank has, restores it.
GroupRun RunGroup(const v1::JobConfig& job, int ranks, const std::vector<v1::TrainBatch>& batches,
                  const std::string& dir) {
  const std::string checkpoint = dir + "/ckpt" + std::to_string(ranks);
  std::filesystem::create_directories(checkpoint);
  std::atomic<int> saved{0};
  absl::StatusOr<int> port = comm::PickFreeTcpPort("127.0.0.1");
  EXPECT_TRUE(port.ok()) << port.status();
  GroupRun run;
  run.stats.resize(ranks);
  run.weights.resize(ranks);
  run.ledger.resize(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      ledger::Ledger ledger;
      ledger.ForwardRecords([&run, r](std::string_view, const ledger::ForwardedRecord& record) {
        if (const auto* o = std::get_if<ledger::ForwardedObject>(&record)) {
          run.ledger[r][std::string(ledger::ObjectName(o->object))] = o->bytes;
        }
      });
      LocalLearnerOptions options;
      options.worker_id = "learner-" + std::to_string(r);
      options.vocab_size = kVocab;
      options.group = {r, ranks, "127.0.0.1", *port, ""};
      auto learner = NewLocalLearner(job, options, /*transport=*/nullptr, &ledger);
      ASSERT_TRUE(learner.ok()) << learner.status();
      for (const v1::TrainBatch& batch : batches) {
        auto stats = (*learner)->TrainStep(batch);
        ASSERT_TRUE(stats.ok()) << stats.status();
        run.stats[r].push_back(*stats);
      }
      const std::string path = dir + "/rank" + std::to_string(r) + ".safetensors";
      ASSERT_TRUE((*learner)->SaveWeights(path).ok());
      auto weights = model::LoadSafetensors(path);
      ASSERT_TRUE(weights.ok()) << weights.status();
      run.weights[r] = *std::move(weights);
      ASSERT_TRUE((*learner)->SaveCheckpoint(checkpoint).ok());
      ++saved;
      while (saved.load() < ranks) std::this_thread::yield();
      absl::Status restored = (*learner)->RestoreCheckpoint(checkpoint);
      EXPECT_TRUE(restored.ok()) << restored;
    });
  }
  for (auto& t : threads) t.join();
  return run;
}

double MaxAbsDiff(const model::NamedTensors& a, const model::NamedTensors& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    diff = std::max(diff, (a[i].second - b[i].second).abs().max().item<double>());
  }
  return diff;
}

// Two ranks, each training on its half of every batch, take the single
// learner's steps: the same stats and weights (to float rounding), with
// the optimizer state split between them under ZeRO-1 and whole on each
// without it.
class LearnerGroupTest : public testing::TestWithParam<int> {};

TEST_P(LearnerGroupTest, TwoRanksMatchOneLearner) {
  const int zero_stage = GetParam();
  const std::string dir =
      ::testing::TempDir() + "/learner_group_" + std::to_string(zero_stage);
  std::filesystem::create_directories(dir);
  v1::JobConfig job = SmallJob(2, v1::TOKEN_MEAN);
  job.mutable_memory()->set_zero_stage(zero_stage);
  job.mutable_grpo()->mutable_optimizer()->set_warmup_steps(0);
  // Several buckets per collective.
  job.mutable_deployment()->set_bucket_bytes(16 << 10);
  // Threads share LibTorch's generator: every learner starts from one file.
  ASSERT_TRUE(MakeLearner(job)->SaveWeights(dir + "/init.safetensors").ok());
  job.mutable_model()->set_init_checkpoint(dir + "/init.safetensors");
  std::vector<v1::TrainBatch> batches;
  for (int step = 0; step < 4; ++step) batches.push_back(RandomBatch(7, 40 + step));

  const GroupRun one = RunGroup(job, 1, batches, dir);
  const GroupRun two = RunGroup(job, 2, batches, dir);
  ASSERT_EQ(two.stats[0].size(), batches.size());
  for (size_t step = 0; step < batches.size(); ++step) {
    const v1::TrainStats& want = one.stats[0][step];
    const v1::TrainStats& got = two.stats[0][step];
    EXPECT_NEAR(got.loss(), want.loss(), 1e-5) << "step " << step;
    EXPECT_NEAR(got.grad_norm(), want.grad_norm(), 1e-5 * want.grad_norm()) << "step " << step;
    EXPECT_NEAR(got.kl(), want.kl(), 1e-6) << "step " << step;
    EXPECT_EQ(got.trained_tokens(), want.trained_tokens()) << "step " << step;
    EXPECT_EQ(want.communication_bytes(), 0);
    for (int r = 0; r < 2; ++r) {
      // Gradients all-reduced, and with ZeRO-1 parameters broadcast too.
      const int64_t moved = two.stats[r][step].communication_bytes();
      EXPECT_GE(moved, (zero_stage == 1 ? 2 : 1) * want.parameter_bytes()) << "rank " << r;
      EXPECT_GT(two.stats[r][step].communication_seconds(), 0);
    }
  }
  const double diff = MaxAbsDiff(two.weights[0], one.weights[0]);
  EXPECT_LT(diff, 1e-5);
  RecordProperty("max_abs_weight_diff", absl::StrCat(diff));
  RecordProperty("communication_bytes_per_step",
                 std::to_string(two.stats[0].back().communication_bytes()));
  RecordProperty("communication_seconds_per_step",
                 absl::StrCat(two.stats[0].back().communication_seconds()));
  EXPECT_EQ(MaxAbsDiff(two.weights[1], two.weights[0]), 0) << "the ranks' weights differ";

  const int64_t whole = one.stats[0].back().optimizer_state_bytes();
  const int64_t rank0 = two.stats[0].back().optimizer_state_bytes();
  const int64_t rank1 = two.stats[1].back().optimizer_state_bytes();
  RecordProperty("optimizer_state_bytes",
                 absl::StrCat(whole, " one rank; ", rank0, " + ", rank1, " two ranks"));
  if (zero_stage == 1) {
    EXPECT_EQ(rank0 + rank1, whole);
    EXPECT_NEAR(rank0, whole / 2, whole / 10);
  } else {
    EXPECT_EQ(rank0, whole);
    EXPECT_EQ(rank1, whole);
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(two.ledger[r].at("optimizer_state"), r == 0 ? rank0 : rank1);
    EXPECT_GT(two.ledger[r].at("communication"), 0);
    EXPECT_LE(two.ledger[r].at("communication"), 16 << 10);
  }
  EXPECT_EQ(one.ledger[0].count("communication"), 0u);

  // Rank 1 wrote its own optimizer file; one learner cannot take them up.
  EXPECT_TRUE(std::filesystem::exists(dir + "/ckpt2/optimizer.rank1.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/ckpt1/optimizer.rank1.safetensors"));
  absl::Status refused = MakeLearner(job)->RestoreCheckpoint(dir + "/ckpt2");
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_NE(std::string(refused.message()).find("learner_ranks 2 but this learner has 1"),
            std::string::npos)
      << refused;
}

INSTANTIATE_TEST_SUITE_P(ZeroStages, LearnerGroupTest, testing::Values(0, 1),
                         [](const auto& info) { return "zero" + std::to_string(info.param); });

}  // namespace
}  // namespace trellis::learner
