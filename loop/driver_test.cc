// The driver and the built-in recipes against fake roles (no model): what
// each recipe hands the learner, and the run's shape around it.

#include "loop/driver.h"

#include <cmath>
#include <iostream>
#include <limits>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loop/recipes/builtin.h"
#include "loop/testing/fake_environment.h"
#include "loop/testing/fake_roles.h"
#include "loop/testing/out_dir.h"

namespace trellis::loop {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

data::Split Arithmetic() {
  data::Split split;
  for (uint64_t i = 0; i < 6; ++i) {
    data::Example ex;
    ex.id = i;
    ex.prompt = std::to_string(i) + "+1=";
    ex.answer = std::to_string(i + 1);
    (i < 4 ? split.train : split.eval).push_back(ex);
  }
  return split;
}

// Two steps of two prompts (pairs, examples), four responses each.
v1::JobConfig Job(const std::string& algorithm) {
  v1::JobConfig job;
  job.set_algorithm(algorithm);
  job.mutable_sft()->set_steps(algorithm == "sft" ? 2 : 0);  // no warm-up otherwise
  job.mutable_sft()->set_batch_size(2);
  job.mutable_grpo()->set_steps(2);
  job.mutable_grpo()->set_prompts_per_step(2);
  job.mutable_grpo()->set_responses_per_prompt(4);
  job.mutable_dpo()->set_steps(2);
  job.mutable_dpo()->set_batch_size(2);
  job.mutable_dpo()->set_responses_per_prompt(4);
  job.mutable_reward_model()->set_steps(2);
  job.mutable_reward_model()->set_batch_size(2);
  return job;
}

struct FakeRun {
  explicit FakeRun(const v1::JobConfig& job, const RecipeRegistry* registry = nullptr)
      : format(text::NewCharTokenizer(), absl::NotFoundError("no chat template")),
        driver(job, fakes.roles(), &format, Arithmetic(), &ledger, out, &progress,
               registry) {}
  const std::string out = testing::FreshOutDir();
  testing::FakeRoles fakes;
  PromptFormat format;
  ledger::Ledger ledger;
  std::ostringstream progress;
  Driver driver;
};

TEST(DriverTest, GrpoTrainsOnItsEstimatorsAdvantages) {
  FakeRun run(Job("grpo"));
  ASSERT_TRUE(run.driver.Run().ok());
  const auto& batches = run.fakes.learner.train_batches;
  ASSERT_EQ(batches.size(), 2u);
  for (const v1::TrainBatch& batch : batches) {
    ASSERT_EQ(batch.samples_size(), 8);
    for (int g = 0; g < 2; ++g) {
      double sum = 0;
      for (int i = 4 * g; i < 4 * g + 4; ++i) {
        const v1::TrainSample& s = batch.samples(i);
        EXPECT_EQ(s.reward(), i % 2 == 0 ? 1 : 0);
        EXPECT_EQ(s.advantage() > 0, s.reward() > 0);
        EXPECT_EQ(s.ref_logprobs_size(), 2);  // grpo.kl_coef 0.01 by default
        sum += s.advantage();
      }
      EXPECT_NEAR(sum, 0, 1e-5);
    }
  }
  // The reference was taken before the run; weights synced after each step.
  EXPECT_EQ(run.fakes.reference.loaded,
            std::vector<std::string>({run.out + "/reference.safetensors"}));
  EXPECT_EQ(run.fakes.actor.policy_version(), 2);
  EXPECT_EQ(run.driver.history().size(), 2u);
  EXPECT_THAT(run.progress.str(), HasSubstr("step    2/2  reward 0.500  acc 0.500"));
  EXPECT_THAT(run.driver.Headline(), HasSubstr("held-out accuracy (greedy)"));
}

// A verifier that dies after the evaluation before the run, its pool still
// answering what its cache holds: the evaluation after leaves a held-out
// prompt unscored, so neither its line, its ledger record nor the closing
// line gives it an accuracy (the one prompt scored is not the held-out set).
TEST(DriverTest, AnIncompleteEvaluationHasNoAccuracy) {
  FakeRun run(Job("grpo"));
  run.fakes.verifier.fail_from_call = 1;
  run.fakes.verifier.fail_prompt = "5+1=";
  std::vector<std::string> evals;
  (void)run.ledger.AddRecordObserver([&evals](std::string_view line) {
    if (line.find("\"type\":\"eval\"") != std::string_view::npos) evals.emplace_back(line);
  });
  ASSERT_TRUE(run.driver.Run().ok());
  const std::string progress = run.progress.str();
  EXPECT_THAT(progress, HasSubstr("eval before  accuracy 1.000  (2 held-out prompts, greedy)\n"));
  EXPECT_THAT(progress, HasSubstr("eval after   INCOMPLETE: 1 of 2 held-out prompts not scored "
                                  "(the verifier failed on them); no accuracy\n"));
  EXPECT_THAT(progress, Not(ContainsRegex("eval after .*accuracy [0-9]")));
  EXPECT_EQ(run.driver.Headline(),
            "held-out accuracy (greedy): before 1.000  after INCOMPLETE (1 of 2 not scored)\n");
  ASSERT_EQ(evals.size(), 2u);
  EXPECT_THAT(evals[0], HasSubstr("\"accuracy\":1.0"));
  EXPECT_THAT(evals[1], HasSubstr("\"accuracy\":null"));
  EXPECT_THAT(evals[1], HasSubstr("\"complete\":false"));
  EXPECT_THAT(evals[1], HasSubstr("\"unscored\":1"));
}

// Rewards beyond verifier.max_abs_reward are clipped, and the run says so
// once, on stderr at its end, with their count (training and evaluation).
TEST(DriverTest, ClippedRewardsAreCountedInOneStderrLine) {
  v1::JobConfig job = Job("grpo");
  job.mutable_verifier()->set_max_abs_reward(10);
  FakeRun run(job);
  run.fakes.verifier.correct_reward = 100;
  std::ostringstream err;
  std::streambuf* old = std::cerr.rdbuf(err.rdbuf());
  const absl::Status s = run.driver.Run();
  std::cerr.rdbuf(old);
  ASSERT_TRUE(s.ok()) << s;
  int64_t clipped = 2 + 2;  // every held-out prompt, before and after
  for (const ledger::StepMetrics& m : run.driver.history()) {
    clipped += m.counts.samples_reward_clipped;
  }
  EXPECT_EQ(clipped, 4 + 2 * 2 * 2);  // and two correct responses of each prompt of each step
  EXPECT_EQ(err.str(), absl::StrCat("verifier: ", clipped,
                                    " rewards beyond verifier.max_abs_reward (10) were clipped to "
                                    "it in this run (samples_reward_clipped in ledger.jsonl)\n"));
  // A run that clips nothing says nothing.
  FakeRun quiet(Job("grpo"));
  err.str("");
  old = std::cerr.rdbuf(err.rdbuf());
  const absl::Status q = quiet.driver.Run();
  std::cerr.rdbuf(old);
  ASSERT_TRUE(q.ok()) << q;
  EXPECT_EQ(err.str(), "");
}

TEST(DriverTest, PpoLeavesTheAdvantageToTheLearner) {
  v1::JobConfig job = Job("ppo");
  job.mutable_ppo()->set_reward(v1::PpoConfig::REWARD_MODEL);
  FakeRun run(job);
  ASSERT_TRUE(run.driver.Run().ok());
  ASSERT_EQ(run.fakes.learner.train_batches.size(), 2u);
  for (const v1::TrainSample& s : run.fakes.learner.train_batches[0].samples()) {
    EXPECT_EQ(s.advantage(), 0);  // unset: the learner computes its own
    EXPECT_EQ(s.reward(), 2);     // the reward model's score
  }
  EXPECT_EQ(run.driver.history()[0].effective_sample_rate, 1);
}

TEST(DriverTest, OnlineDpoTrainsOnAPairPerPrompt) {
  FakeRun run(Job("online_dpo"));
  ASSERT_TRUE(run.driver.Run().ok());
  ASSERT_EQ(run.fakes.learner.preference_batches.size(), 2u);
  const v1::PreferenceBatch& batch = run.fakes.learner.preference_batches[0];
  ASSERT_EQ(batch.pairs_size(), 2);
  EXPECT_EQ(batch.pairs(0).ref_chosen_logprob(), -2);  // two tokens at -1
  EXPECT_TRUE(run.fakes.learner.train_batches.empty());
}

TEST(DriverTest, RecipesOnFixedDataNeverRollOut) {
  for (const char* algorithm : {"sft", "dpo", "reward_model"}) {
    FakeRun run(Job(algorithm));
    ASSERT_TRUE(run.driver.Run().ok()) << algorithm;
    EXPECT_EQ(run.fakes.actor.requests, 0) << algorithm;
    EXPECT_EQ(run.fakes.learner.publishes, 0) << algorithm;
    EXPECT_EQ(run.fakes.learner.sft_batches.size() + run.fakes.learner.preference_batches.size(),
              2u)
        << algorithm;
    EXPECT_EQ(run.driver.history().size(), 2u) << algorithm;
  }
}

TEST(DriverTest, EveryBuiltinRecipeRunsItsStepsAgainstFakeRoles) {
  for (const std::string& name : BuiltinRecipes().names()) {
    FakeRun run(Job(name));
    ASSERT_TRUE(run.driver.Run().ok()) << name;
    EXPECT_EQ(run.driver.history().size(), static_cast<size_t>(RecipeSteps(Job(name)))) << name;
    EXPECT_EQ(run.fakes.learner.policy_version(), 2) << name;
    EXPECT_FALSE(run.driver.Headline().empty()) << name;
  }
}

TEST(DriverTest, CancelStopsBeforeTheNextStep) {
  FakeRun run(Job("grpo"));
  run.driver.SetStopRequested([&run] { return run.driver.history().size() == 1; });
  const absl::Status s = run.driver.Run();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(s.message(), HasSubstr("cancelled before step 1"));
}

TEST(DriverTest, CheckpointsEveryNStepsThroughTheWriter) {
  v1::JobConfig job = Job("grpo");
  job.mutable_runtime()->set_checkpoint_every(1);
  FakeRun run(job);
  std::vector<int64_t> written;
  run.driver.SetCheckpointWriter([&written](const LoopState& state) {
    written.push_back(state.next_step);
    return absl::OkStatus();
  });
  ASSERT_TRUE(run.driver.Run().ok());
  EXPECT_EQ(written, std::vector<int64_t>({1, 2}));
}

// Rewards of 1e38 are clipped to verifier.max_abs_reward under every
// estimator, and counted; the advantages stay finite and carry the signal.
TEST(DriverTest, HugeRewardsAreClippedUnderEveryEstimator) {
  using Estimator = v1::GrpoConfig::AdvantageEstimator;
  for (const auto& [estimator, scale] :
       {std::pair{v1::GrpoConfig::GRPO, true}, std::pair{v1::GrpoConfig::GRPO, false},
        std::pair{v1::GrpoConfig::RLOO, true}, std::pair{v1::GrpoConfig::REINFORCE_PP, true}}) {
    v1::JobConfig job = Job("grpo");
    job.mutable_grpo()->set_advantage_estimator(static_cast<Estimator>(estimator));
    job.mutable_grpo()->set_scale_rewards(scale);
    FakeRun run(job);
    run.fakes.verifier.correct_reward = 1e38f;
    run.fakes.verifier.wrong_reward = -1e38f;
    ASSERT_TRUE(run.driver.Run().ok()) << estimator;
    for (const v1::TrainBatch& batch : run.fakes.learner.train_batches) {
      for (const v1::TrainSample& s : batch.samples()) {
        EXPECT_EQ(std::fabs(s.reward()), 1e4f) << estimator;
        EXPECT_TRUE(std::isfinite(s.advantage())) << estimator;
        EXPECT_EQ(s.advantage() > 0, s.reward() > 0) << estimator;
      }
    }
    ASSERT_EQ(run.driver.history().size(), 2u);
    for (const ledger::StepMetrics& m : run.driver.history()) {
      EXPECT_EQ(m.counts.samples_reward_clipped, 8) << estimator;
      EXPECT_EQ(m.counts.samples_error, 0) << estimator;
    }
  }
}

// A non-finite reward is an error: ERROR verdict, reward_wrong, counted.
TEST(DriverTest, NonFiniteRewardsAreVerifierErrors) {
  FakeRun run(Job("grpo"));
  run.fakes.verifier.wrong_reward = std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE(run.driver.Run().ok());
  for (const v1::TrainBatch& batch : run.fakes.learner.train_batches) {
    for (const v1::TrainSample& s : batch.samples()) EXPECT_TRUE(std::isfinite(s.advantage()));
  }
  for (const ledger::StepMetrics& m : run.driver.history()) {
    EXPECT_EQ(m.counts.samples_error, 4);
    EXPECT_EQ(m.counts.samples_reward_clipped, 0);
  }
}

TEST(DriverTest, SkippedUpdatesAreCountedInTheStepRecords) {
  FakeRun run(Job("grpo"));
  run.fakes.learner.skip_nonfinite = true;
  ASSERT_TRUE(run.driver.Run().ok());
  ASSERT_EQ(run.driver.history().size(), 2u);
  for (const ledger::StepMetrics& m : run.driver.history()) {
    EXPECT_EQ(m.counts.steps_skipped_nonfinite, 1);
  }
}

TEST(DriverTest, AnUnknownAlgorithmNamesTheRecipes) {
  FakeRun run(Job("kto"));
  const absl::Status s = run.driver.Run();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("algorithm: must be one of grpo, ppo, sft, dpo, online_dpo"));
}

// Multi-turn GRPO (job.environment, docs/multi-turn.md): three steps of two
// prompts, two episodes each.
v1::JobConfig MultiTurnJob() {
  v1::JobConfig job = Job("grpo");
  job.mutable_model()->set_max_seq_len(64);
  job.mutable_sampling()->set_max_new_tokens(8);
  job.mutable_grpo()->set_steps(3);
  job.mutable_grpo()->set_responses_per_prompt(2);
  v1::EnvironmentConfig* env = job.mutable_environment();
  env->set_name("fake");
  env->set_turn_stop("|");
  env->set_max_turns(3);
  env->set_workers(2);
  return job;
}

struct MultiTurnRun {
  explicit MultiTurnRun(const v1::JobConfig& job, bool bind_environment = true)
      : format(text::NewCharTokenizer(), absl::NotFoundError("no chat template")),
        actor(&format.tokenizer()),
        driver(job, Bound(bind_environment), &format, Arithmetic(), &ledger, out, &progress) {}
  Roles Bound(bool bind_environment) {
    Roles roles = fakes.roles();
    roles.actor = &actor;
    if (bind_environment) roles.environment = &environment;
    return roles;
  }
  const std::string out = testing::FreshOutDir();
  testing::FakeRoles fakes;
  PromptFormat format;
  testing::FakeTurnActor actor;
  testing::FakeEnvironment environment;
  ledger::Ledger ledger;
  std::ostringstream progress;
  std::vector<std::string> records;
  Driver driver;
};

// The episodes' samples reach the learner with their trained masks and
// the environment's rewards, and the ledger gets an "environment" record
// per step.
TEST(MultiTurnTest, GrpoTrainsOnEpisodes) {
  MultiTurnRun run(MultiTurnJob());
  run.environment.done_at_turn = 1;
  run.ledger.AddRecordObserver([&run](std::string_view r) { run.records.emplace_back(r); });
  ASSERT_TRUE(run.driver.Run().ok()) << run.progress.str();
  const auto& batches = run.fakes.learner.train_batches;
  ASSERT_EQ(batches.size(), 3u);
  for (const v1::TrainBatch& batch : batches) {
    ASSERT_EQ(batch.samples_size(), 4);
    for (const v1::TrainSample& s : batch.samples()) {
      // "Q:", a turn of 3, "o0;", a turn of 3: the environment's tokens
      // are in the sequence but not trained.
      ASSERT_EQ(s.response_tokens_size(), 11);
      const std::vector<int32_t> ids(s.response_tokens().begin(), s.response_tokens().end());
      const std::string text = run.format.tokenizer().Decode(ids);
      EXPECT_TRUE(std::regex_match(text, std::regex(R"(Q:g[0-9]\|o0;g[0-9]\|)"))) << text;
      EXPECT_EQ(*run.format.tokenizer().Encode(text), ids);
      EXPECT_EQ(std::vector<bool>(s.trained().begin(), s.trained().end()),
                (std::vector<bool>{false, false, true, true, true, false, false, false, true, true,
                                   true}));
      EXPECT_FLOAT_EQ(s.reward(), 1.0f);  // two steps of 0.5
      EXPECT_EQ(s.old_logprobs(0), 0);
    }
  }
  EXPECT_EQ(run.environment.closed, run.environment.opened);
  int environment_records = 0;
  for (const std::string& r : run.records) {
    if (r.find("\"type\":\"environment\"") == std::string::npos) continue;
    ++environment_records;
    EXPECT_THAT(r, HasSubstr("\"ended_by\":{\"done\":4}"));
    EXPECT_THAT(r, HasSubstr("\"turns_max\":2"));
  }
  EXPECT_EQ(environment_records, 3);
}

TEST(MultiTurnTest, AnEnvironmentJobNeedsABoundEnvironment) {
  MultiTurnRun run(MultiTurnJob(), /*bind_environment=*/false);
  const absl::Status s = run.driver.Run();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("environment.name is \"fake\" but the run bound no "
                                     "environment"));
}

}  // namespace
}  // namespace trellis::loop
