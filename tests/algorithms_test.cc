// End-to-end: RLOO, REINFORCE++ and DAPO as options of the GRPO loop, and
// PPO (algorithm ppo: a critic and GAE), each on the 1-digit arithmetic
// tiny job; each raises the training reward (the mean reward of the last
// steps above that of the first steps). One thread,
// a fixed seed: the runs are deterministic, so the margins below are the
// same on every machine that gives the same floating-point results.

#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gtest/gtest.h"
#include "run/embedded_job.h"
#include "tests/tiny_job.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The tiny job on 1-digit addition (100 problems, 90 for training): an SFT
// warm-up until the policy solves 40% of a batch (teacher-forced), then 40
// steps of 32 prompts x 8 responses, the learning rate rising to 0.003 over
// 10 steps. (With 8 prompts a step the reward moves by less than its
// step-to-step noise in this many steps.) A run takes 2-3 s on one core.
v1::JobConfig AlgorithmJob() {
  v1::JobConfig job = testing_util::TinyJob();
  auto* a = job.mutable_data()->mutable_arithmetic();
  a->set_min_digits(1);
  a->set_max_digits(1);
  a->set_operators("+");
  a->set_num_problems(100);
  job.mutable_sft()->set_steps(300);
  job.mutable_sft()->set_batch_size(32);
  job.mutable_sft()->set_target_accuracy(0.4f);
  job.mutable_sft()->mutable_optimizer()->set_lr(0.01f);
  auto* g = job.mutable_grpo();
  g->set_steps(40);
  g->set_prompts_per_step(32);
  g->set_responses_per_prompt(8);
  g->set_micro_batch_size(256);
  g->mutable_optimizer()->set_lr(0.003f);
  g->mutable_optimizer()->set_warmup_steps(10);
  job.mutable_eval()->set_num_prompts(0);
  return job;
}

// Steps of the reward-model job in the test below.
constexpr int kRewardModelSteps = 150;

using testing_util::JobRun;
using testing_util::MeanOver;

JobRun RunJob(const std::string& name, const v1::JobConfig& job) {
  return testing_util::RunTinyJob("algorithms_" + name, job);
}

// The mean reward of the last `k` steps is above that of the first `k` by
// at least `margin`.
void ExpectRewardRises(const JobRun& run, size_t k, double margin) {
  ASSERT_GE(run.steps.size(), 2 * k);
  const double first = MeanOver(run, "mean_reward", 0, k);
  const double last = MeanOver(run, "mean_reward", run.steps.size() - k, run.steps.size());
  EXPECT_GT(last, first + margin) << "first " << k << " steps " << first << ", last " << k
                                  << " steps " << last << " (" << run.dir << ")";
  std::cout << run.dir.filename() << ": mean reward, first " << k << " steps " << first
            << ", last " << k << " steps " << last << "\n";
}

TEST(AlgorithmsTest, RlooRaisesTheReward) {
  v1::JobConfig job = AlgorithmJob();
  job.mutable_grpo()->set_advantage_estimator(v1::GrpoConfig::RLOO);
  ExpectRewardRises(RunJob("rloo", job), 10, 0.05);
}

TEST(AlgorithmsTest, ReinforcePlusPlusRaisesTheReward) {
  v1::JobConfig job = AlgorithmJob();
  job.mutable_grpo()->set_advantage_estimator(v1::GrpoConfig::REINFORCE_PP);
  ExpectRewardRises(RunJob("reinforce_pp", job), 10, 0.05);
}

TEST(AlgorithmsTest, DapoRaisesTheRewardAndRecordsItsSampling) {
  v1::JobConfig job = AlgorithmJob();
  auto* d = job.mutable_grpo()->mutable_dapo();
  d->set_clip_eps_low(0.2f);
  d->set_clip_eps_high(0.28f);
  d->set_dynamic_sampling(true);
  d->set_max_sampling_rounds(3);
  d->set_overlong_filtering(true);
  job.mutable_grpo()->set_loss_aggregation(v1::TOKEN_MEAN);
  const JobRun run = RunJob("dapo", job);
  ExpectRewardRises(run, 10, 0.05);

  // Dynamic sampling: steps with extra rounds drew extra prompts, and every
  // step trained on at most prompts_per_step groups with mixed rewards.
  int64_t rounds = 0, extra_prompts = 0, zero_variance = 0;
  for (const json& s : run.steps) {
    const int64_t group = s["responses_per_prompt"].get<int64_t>();
    rounds += s["sampling_rounds_extra"].get<int64_t>();
    extra_prompts += s["prompts_extra"].get<int64_t>();
    zero_variance += s["samples_zero_variance"].get<int64_t>();
    EXPECT_LE(s["sampling_rounds_extra"].get<int64_t>(), 2);
    EXPECT_EQ(s["prompts"].get<int64_t>(), 32 + s["prompts_extra"].get<int64_t>());
    EXPECT_EQ(s["samples_generated"].get<int64_t>(), s["prompts"].get<int64_t>() * group);
    const int64_t trained_groups =
        (s["samples_generated"].get<int64_t>() - s["samples_zero_variance"].get<int64_t>() -
         s["samples_surplus"].get<int64_t>()) / group;
    EXPECT_LE(trained_groups, 32);
    EXPECT_TRUE(s["sampling_seconds_extra"].is_number());  // measured; never asserted on
  }
  EXPECT_GT(rounds, 0);
  EXPECT_GT(zero_variance, 0);
  EXPECT_EQ(run.summary["dynamic_sampling"]["rounds_extra"].get<int64_t>(), rounds);
  EXPECT_EQ(run.summary["dynamic_sampling"]["prompts_extra"].get<int64_t>(), extra_prompts);
}

// Overlong filtering: with a response budget too short for two-digit
// answers, truncated samples are counted and left out of the loss.
TEST(AlgorithmsTest, OverlongFilteringLeavesTruncatedSamplesOut) {
  v1::JobConfig job = AlgorithmJob();
  job.mutable_sft()->set_steps(20);
  job.mutable_grpo()->set_steps(3);
  job.mutable_sampling()->set_max_new_tokens(2);  // "12" + end-of-text does not fit
  job.mutable_grpo()->mutable_dapo()->set_overlong_filtering(true);
  const JobRun filtered = RunJob("overlong", job);
  job.mutable_grpo()->mutable_dapo()->set_overlong_filtering(false);
  const JobRun plain = RunJob("overlong_off", job);
  ASSERT_EQ(filtered.steps.size(), 3u);
  ASSERT_EQ(plain.steps.size(), 3u);
  // Step 0 samples the same responses in both runs.
  const json& f = filtered.steps[0];
  const json& p = plain.steps[0];
  EXPECT_EQ(f["samples_generated"], p["samples_generated"]);
  EXPECT_GT(f["samples_overlong"].get<int64_t>(), 0);
  EXPECT_EQ(p["samples_overlong"].get<int64_t>(), 0);
  EXPECT_LT(f["trained_tokens"].get<int64_t>(), p["trained_tokens"].get<int64_t>());
  EXPECT_EQ(filtered.summary["samples"]["overlong"].get<int64_t>(),
            f["samples_overlong"].get<int64_t>() +
                filtered.steps[1]["samples_overlong"].get<int64_t>() +
                filtered.steps[2]["samples_overlong"].get<int64_t>());
}

// The defaults spelled out (advantage_estimator grpo, DAPO clips equal to
// clip_eps, no dynamic sampling or filtering) give the default run, bit for
// bit.
TEST(AlgorithmsTest, ExplicitGrpoDefaultsEqualTheDefaultRun) {
  v1::JobConfig job = testing_util::TinyJob();
  const JobRun plain = RunJob("default", job);
  job.mutable_grpo()->set_advantage_estimator(v1::GrpoConfig::GRPO);
  job.mutable_grpo()->mutable_dapo()->set_clip_eps_low(job.grpo().clip_eps());
  job.mutable_grpo()->mutable_dapo()->set_clip_eps_high(job.grpo().clip_eps());
  job.mutable_grpo()->mutable_dapo()->set_max_sampling_rounds(7);
  const JobRun spelled = RunJob("spelled", job);
  ASSERT_EQ(plain.steps.size(), spelled.steps.size());
  for (size_t i = 0; i < plain.steps.size(); ++i) {
    EXPECT_EQ(plain.steps[i]["mean_reward"], spelled.steps[i]["mean_reward"]) << i;
    EXPECT_EQ(plain.steps[i]["loss"], spelled.steps[i]["loss"]) << i;
  }
  const std::string w = testing_util::Slurp(plain.dir / "policy.safetensors");
  ASSERT_FALSE(w.empty());
  EXPECT_TRUE(w == testing_util::Slurp(spelled.dir / "policy.safetensors"));
}


// PPO with either critic, the KL to the reference in the reward (the
// default) or in the loss.
v1::JobConfig PpoJob(v1::PpoConfig::Critic critic) {
  v1::JobConfig job = AlgorithmJob();
  job.set_algorithm("ppo");
  job.mutable_ppo()->set_critic(critic);
  job.mutable_ppo()->mutable_critic_optimizer()->set_lr(0.003f);
  return job;
}

// Peak bytes of `object` in the run's summary.
int64_t ObjectPeak(const JobRun& run, const char* object) {
  return run.summary["memory"]["objects"][object].get<int64_t>();
}

TEST(AlgorithmsTest, PpoWithASeparateCriticRaisesTheReward) {
  const JobRun run = RunJob("ppo_separate", PpoJob(v1::PpoConfig::SEPARATE));
  ExpectRewardRises(run, 10, 0.05);
  // The critic learned: over the last steps its value loss is well below
  // that of a critic predicting 0 (half the mean squared return; the
  // rewards are 0 or 1, so about half the mean reward).
  const size_t n = run.steps.size();
  EXPECT_LT(MeanOver(run, "value_loss", n - 10, n),
            0.8 * 0.5 * MeanOver(run, "mean_reward", n - 10, n));
  // The ledger lists PPO's extra resident objects: the critic (a model of
  // the policy's size: its weights, gradients and AdamW state) and the
  // rollout buffer the update trained on.
  // (The policy's size is its gradients': only the learner holds those;
  // every role reports its own parameters.)
  EXPECT_GT(ObjectPeak(run, "critic"), 3 * ObjectPeak(run, "gradients"));
  EXPECT_GT(ObjectPeak(run, "rollout_buffer"), 0);
  EXPECT_EQ(ObjectPeak(run, "reward_model"), 0);
}

TEST(AlgorithmsTest, PpoWithASharedCriticAndKlInTheLossRaisesTheReward) {
  v1::JobConfig job = PpoJob(v1::PpoConfig::SHARED);
  job.mutable_ppo()->set_kl_mode(v1::PpoConfig::LOSS);
  const JobRun run = RunJob("ppo_shared", job);
  ExpectRewardRises(run, 10, 0.05);
  // A value head on the policy's trunk: d_model floats and their gradient.
  EXPECT_EQ(ObjectPeak(run, "critic"), 2 * 32 * 4);
  EXPECT_GT(ObjectPeak(run, "rollout_buffer"), 0);
}


// A reward model learns the arithmetic preference pairs (chosen: the right
// answer, rejected: a near miss) with the Bradley-Terry loss, and PPO with
// that model as its reward raises its score; the ledger lists the reward
// model among the reference role's objects.
TEST(AlgorithmsTest, RewardModelLearnsPreferencesAndPpoRaisesItsScore) {
  v1::JobConfig rm_job = AlgorithmJob();
  rm_job.set_algorithm("reward_model");
  rm_job.mutable_reward_model()->set_steps(kRewardModelSteps);
  rm_job.mutable_reward_model()->set_batch_size(64);
  rm_job.mutable_reward_model()->mutable_optimizer()->set_lr(0.003f);
  const JobRun rm = RunJob("reward_model", rm_job);
  ASSERT_TRUE(fs::exists(rm.dir / "reward_model.safetensors"));
  const double before = rm.summary["eval"]["before"]["accuracy"].get<double>();
  const double after = rm.summary["eval"]["after"]["accuracy"].get<double>();
  std::cout << "reward model: held-out preference accuracy " << before << " -> " << after
            << "\n";
  EXPECT_GT(after, before + 0.2);

  v1::JobConfig job = PpoJob(v1::PpoConfig::SEPARATE);
  job.mutable_ppo()->set_reward(v1::PpoConfig::REWARD_MODEL);
  job.mutable_ppo()->set_reward_model_path((rm.dir / "reward_model.safetensors").string());
  const JobRun run = RunJob("ppo_reward_model", job);
  ExpectRewardRises(run, 10, 0.05);
  EXPECT_GT(ObjectPeak(run, "reward_model"), 0);
  EXPECT_GT(run.summary["stage_seconds"]["reward"].get<double>(), 0);
}

}  // namespace
}  // namespace trellis
