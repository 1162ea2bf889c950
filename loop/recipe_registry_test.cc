#include <memory>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loop/driver.h"
#include "loop/recipe.h"
#include "loop/testing/fake_roles.h"
#include "verifier/verifier.h"

namespace trellis::loop {
namespace {

using ::testing::HasSubstr;

RecipeSpec Spec() {
  RecipeSpec spec;
  spec.needs_reference = [](const v1::JobConfig&) { return false; };
  spec.steps = [](const v1::JobConfig&) { return int64_t{1}; };
  spec.create = [](Driver&) -> absl::StatusOr<std::unique_ptr<Recipe>> {
    return absl::UnimplementedError("not for running");
  };
  return spec;
}

TEST(RecipeRegistryTest, RefusesDuplicatesAndIncompleteSpecs) {
  RecipeRegistry registry;
  ASSERT_TRUE(registry.Register("mine", Spec()).ok());
  EXPECT_EQ(registry.Register("mine", Spec()).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.Register("", Spec()).code(), absl::StatusCode::kInvalidArgument);
  RecipeSpec no_steps = Spec();
  no_steps.steps = nullptr;
  EXPECT_EQ(registry.Register("other", no_steps).code(), absl::StatusCode::kInvalidArgument);
  const absl::Status unknown = registry.Find("kto").status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(unknown.message(), "algorithm: must be one of mine, found \"kto\"");
}

TEST(RecipeRegistryTest, BuiltinsInTheirOrder) {
  const std::vector<std::string> names = BuiltinRecipes().names();
  ASSERT_GE(names.size(), 6u);
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + 6),
            std::vector<std::string>({"grpo", "ppo", "sft", "dpo", "online_dpo", "reward_model"}));
  RecipeRegistry again;
  ASSERT_TRUE(RegisterBuiltinRecipes(again).ok());
  EXPECT_EQ(RegisterBuiltinRecipes(again).code(), absl::StatusCode::kAlreadyExists);
}

TEST(RecipeRegistryTest, RecipesNameTheirRolesAndSteps) {
  v1::JobConfig job;
  job.mutable_grpo()->set_steps(7);
  job.mutable_sft()->set_steps(8);
  job.mutable_dpo()->set_steps(9);
  job.mutable_deployment()->mutable_actor()->set_count(3);
  EXPECT_TRUE(CheckRecipe(job).ok());  // grpo by default
  EXPECT_TRUE(NeedsReference(job));    // grpo.kl_coef 0.01 by default
  EXPECT_EQ(RecipeSteps(job), 7);
  EXPECT_EQ(WorkersNeeded(job, v1::ACTOR), 3);
  job.mutable_grpo()->set_kl_coef(0);
  EXPECT_FALSE(NeedsReference(job));
  EXPECT_EQ(WorkersNeeded(job, v1::REFERENCE), 0);
  job.set_algorithm("ppo");
  job.mutable_ppo()->set_reward(v1::PpoConfig::REWARD_MODEL);
  EXPECT_TRUE(NeedsReference(job));
  job.set_algorithm("sft");
  EXPECT_FALSE(NeedsReference(job));
  EXPECT_EQ(RecipeSteps(job), 8);
  EXPECT_EQ(WorkersNeeded(job, v1::ACTOR), 0);
  EXPECT_EQ(WorkersNeeded(job, v1::VERIFIER), 0);
  EXPECT_EQ(WorkersNeeded(job, v1::LEARNER), 1);
  EXPECT_EQ(WorkersNeeded(job, v1::SCHEDULER), 0);
  for (const char* algorithm : {"dpo", "online_dpo"}) {
    job.set_algorithm(algorithm);
    EXPECT_TRUE(NeedsReference(job)) << algorithm;
    EXPECT_EQ(RecipeSteps(job), 9) << algorithm;
  }
  EXPECT_EQ(WorkersNeeded(job, v1::ACTOR), 3);  // online_dpo rolls out
  job.set_algorithm("reward_model");
  job.mutable_reward_model()->set_steps(10);
  EXPECT_FALSE(NeedsReference(job));
  EXPECT_EQ(RecipeSteps(job), 10);
  job.set_algorithm("kto");
  EXPECT_THAT(CheckRecipe(job).message(), HasSubstr("found \"kto\""));
}

TEST(RecipeRegistryTest, APlugInRecipeRunsThroughTheDriver) {
  // A recipe of a test's own: one step that counts, no rollout.
  class Count final : public Recipe {
   public:
    absl::Status Prepare() override { return absl::OkStatus(); }
    absl::StatusOr<ledger::EvalMetrics> Evaluate(const std::string&) override {
      return ledger::EvalMetrics();
    }
    absl::Status Step(int64_t, ledger::StepCounts& counts) override {
      counts.prompts = 5;
      return absl::OkStatus();
    }
    std::string Progress(int64_t, const ledger::StepCounts&,
                         const ledger::StepMetrics&) const override {
      return "counted\n";
    }
    std::string Headline(const ledger::EvalMetrics&, const ledger::EvalMetrics&) const override {
      return "done\n";
    }
  };
  RecipeRegistry registry;
  RecipeSpec spec = Spec();
  spec.rolls_out = false;
  spec.steps = [](const v1::JobConfig&) { return int64_t{3}; };
  spec.create = [](Driver&) -> absl::StatusOr<std::unique_ptr<Recipe>> {
    return std::make_unique<Count>();
  };
  ASSERT_TRUE(registry.Register("count", std::move(spec)).ok());
  v1::JobConfig job;
  job.set_algorithm("count");
  testing::FakeRoles fakes;
  ledger::Ledger ledger;
  std::ostringstream progress;
  Driver driver(job, fakes.roles(), nullptr, data::Split(), &ledger, "", &progress, &registry);
  ASSERT_TRUE(driver.Run().ok());
  EXPECT_EQ(driver.history().size(), 3u);
  EXPECT_EQ(progress.str(), "counted\ncounted\ncounted\n");
  EXPECT_EQ(driver.Headline(), "done\n");
}

// PrepareJob checks what building the roles would (docs/architecture.md,
// the path of one sample, step 1): the verifier's kind and what it
// requires, and the vocabulary against the tokenizer's; the kinds main adds
// count (verifier::AddProcessVerifierKinds).
TEST(PrepareJobTest, RefusesWhatBuildingTheRolesWould) {
  v1::JobConfig job;
  job.mutable_verifier()->set_name("nosuch");
  absl::Status s = PrepareJob(&job);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("verifier.name: unknown verifier \"nosuch\"; registered "
                                     "verifiers: code_exec, countdown"));
  job = v1::JobConfig();
  job.mutable_verifier()->set_name("regex");
  s = PrepareJob(&job);
  EXPECT_THAT(s.message(), HasSubstr("verifier.pattern: regex needs a non-empty pattern"));
  verifier::AddProcessVerifierKinds([](verifier::VerifierRegistry& registry) {
    return registry.Register(
        "addressed",
        [](const v1::VerifierConfig&) -> absl::StatusOr<std::unique_ptr<verifier::Verifier>> {
          return absl::InternalError("never built by PrepareJob");
        },
        [](const v1::VerifierConfig& c) {
          return c.address().empty() ? absl::InvalidArgumentError("verifier.address: required")
                                     : absl::OkStatus();
        });
  });
  job = v1::JobConfig();
  job.mutable_verifier()->set_name("addressed");
  EXPECT_THAT(PrepareJob(&job).message(), HasSubstr("verifier.address: required"));
  job.mutable_verifier()->set_address("127.0.0.1:1");
  EXPECT_TRUE(PrepareJob(&job).ok());

  job = v1::JobConfig();
  job.mutable_model()->set_vocab_size(8);
  s = PrepareJob(&job);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("model.vocab_size: must be >= the size of the tokenizer's "
                                     "vocabulary ("));
  EXPECT_THAT(s.message(), HasSubstr("the built-in character tokenizer; 0 takes it), found 8"));
}

}  // namespace
}  // namespace trellis::loop
