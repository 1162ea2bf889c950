// PPO (algorithm "ppo"): the policy-gradient step with no advantages of
// its own: every sample carries its reward and the learner's critic and
// GAE give per-token advantages. With ppo.reward "reward_model" the rewards
// are the reference's reward-model scores (the verifier's verdicts still
// give the accuracy).

#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "config/worker_id.h"
#include "loop/loop_util.h"
#include "loop/policy_gradient.h"
#include "loop/recipes/builtin.h"

namespace trellis::loop {
namespace {

// ppo.reward "reward_model".
bool RewardModelRewards(const v1::JobConfig& job) {
  return job.ppo().reward() == v1::PpoConfig::REWARD_MODEL;
}

class Ppo final : public PolicyGradientRecipe {
 public:
  using PolicyGradientRecipe::PolicyGradientRecipe;

 private:
  absl::StatusOr<std::vector<float>> Rewards(const StepSamples& drawn) override {
    if (!RewardModelRewards(driver_.job())) return PolicyGradientRecipe::Rewards(drawn);
    const auto& samples = drawn.rollout.samples();
    v1::LogProbRequest scored;
    *scored.mutable_samples() = samples;
    absl::StatusOr<v1::ScoreResponse> scores;
    {
      auto span = driver_.ledger().Begin(ledger::Stage::kReward,
                                         config::WorkerId(v1::REFERENCE).ToString());
      scores = driver_.roles().reference->Scores(scored);
    }
    if (!scores.ok()) return At(scores.status(), "reward model");
    if (scores->scores_size() != samples.size()) {
      return absl::InternalError(absl::StrCat("reward model: ", scores->scores_size(),
                                              " scores for ", samples.size(), " samples"));
    }
    return std::vector<float>(scores->scores().begin(), scores->scores().end());
  }

  absl::StatusOr<std::optional<learner::GroupAdvantages>> Advantages(
      const std::vector<float>& rewards, std::vector<bool>& dropped) const override {
    return std::optional<learner::GroupAdvantages>();
  }
};

}  // namespace

absl::Status RegisterPpo(RecipeRegistry& registry) {
  RecipeSpec spec;
  spec.needs_reference = [](const v1::JobConfig& job) {
    return job.grpo().kl_coef() > 0 || RewardModelRewards(job);
  };
  spec.steps = [](const v1::JobConfig& job) { return job.grpo().steps(); };
  spec.create = [](Driver& driver) -> absl::StatusOr<std::unique_ptr<Recipe>> {
    return std::make_unique<Ppo>(driver);
  };
  return registry.Register("ppo", std::move(spec));
}

}  // namespace trellis::loop
