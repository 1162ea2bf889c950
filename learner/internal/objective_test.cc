// A new recipe's objective on the learner side: registered by its key and
// driven by the update engine with a tiny model, without LocalLearner.

#include "learner/internal/objective.h"

#include <memory>
#include <utility>
#include <vector>

#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "learner/internal/data_parallel.h"
#include "learner/internal/learner_models.h"
#include "learner/internal/update_engine.h"
#include "model/token_batch.h"

namespace trellis::learner::internal {
namespace {

using config::Recipe;

constexpr int kVocab = 20;

v1::JobConfig TinyJob(int micro_batch) {
  v1::JobConfig job;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(algorithm: "sft"
           model { d_model: 16 n_layers: 1 n_heads: 2 n_kv_heads: 1 d_ff: 32 max_seq_len: 16 }
           sft { optimizer { lr: 0.01 } })pb",
      &job));
  job.mutable_grpo()->set_micro_batch_size(micro_batch);
  return job;
}

v1::SftBatch Batch() {
  v1::SftBatch batch;
  for (int i = 0; i < 5; ++i) {
    auto* pair = batch.add_pairs();
    for (int t : {1, 3 + i}) pair->add_prompt_tokens(t);
    for (int t : {10 + i, 2, 4 + i}) pair->add_target_tokens(t);
  }
  return batch;
}

// A toy recipe's objective: unlikelihood, the mean log-prob of the target
// tokens, which a step pushes down. Records the rows of every call.
class UnlikelihoodObjective : public Objective {
 public:
  UnlikelihoodObjective(const ObjectiveInput& in, std::vector<std::pair<int64_t, int64_t>>* calls)
      : in_(in), batch_(*std::get<const v1::SftBatch*>(in.batch)), calls_(calls) {
    for (const auto& pair : batch_.pairs()) total_tokens_ += pair.target_tokens_size();
  }

  PhaseId phase() const override { return PhaseId::kSft; }
  int64_t rows() const override { return batch_.pairs_size(); }
  absl::StatusOr<MicroResult> Loss(int64_t begin, int64_t end) override {
    calls_->emplace_back(begin, end);
    std::vector<model::SequencePair> pairs;
    for (int64_t i = begin; i < end; ++i) {
      pairs.push_back({batch_.pairs(i).prompt_tokens(), batch_.pairs(i).target_tokens()});
    }
    absl::StatusOr<model::TokenBatch> tb = in_.Tokens(pairs);
    if (!tb.ok()) return tb.status();
    const torch::Tensor logp = model::TargetLogProbs(in_.models->policy(), *tb);
    MicroResult r;
    r.loss = (logp * tb->response_mask).sum() / total_tokens_;
    r.tokens = tb->response_mask.sum().item<double>();
    return r;
  }

 private:
  const ObjectiveInput in_;
  const v1::SftBatch& batch_;
  std::vector<std::pair<int64_t, int64_t>>* calls_;
  double total_tokens_ = 0;
};

// A learner's models and engine, without a LocalLearner.
struct Rig {
  explicit Rig(const v1::JobConfig& job_config) : job(job_config) {
    auto built = LearnerModels::Build(job, kVocab, /*seed=*/7, "learner-0", torch::kCPU);
    EXPECT_TRUE(built.ok()) << built.status();
    models = *std::move(built);
    auto group = DataParallelGroup::Join(GroupOptions());
    EXPECT_TRUE(group.ok()) << group.status();
    engine = std::make_unique<UpdateEngine>(job, "learner-0", models.get(), *std::move(group),
                                            /*ledger=*/nullptr);
  }

  ObjectiveInput Input(const v1::SftBatch& batch) {
    ObjectiveInput in;
    in.job = &job;
    in.models = models.get();
    in.worker_id = "learner-0";
    in.batch = &batch;
    return in;
  }

  v1::JobConfig job;
  std::unique_ptr<LearnerModels> models;
  std::unique_ptr<UpdateEngine> engine;
};

ObjectiveFactory Unlikelihood(std::vector<std::pair<int64_t, int64_t>>* calls) {
  return [calls](const ObjectiveInput& in) -> absl::StatusOr<std::unique_ptr<Objective>> {
    return std::make_unique<UnlikelihoodObjective>(in, calls);
  };
}

TEST(ObjectiveTest, EngineStepsARegisteredObjectiveMicroBatchByMicroBatch) {
  Rig rig(TinyJob(/*micro_batch=*/2));
  std::vector<std::pair<int64_t, int64_t>> calls;
  ObjectiveRegistry registry;
  ASSERT_TRUE(registry.Register({BatchKind::kSft, Recipe::kSft}, Unlikelihood(&calls)).ok());
  const v1::SftBatch batch = Batch();
  auto objective = registry.New(Recipe::kSft, rig.Input(batch));
  ASSERT_TRUE(objective.ok()) << objective.status();

  auto before = rig.engine->Measure(**objective);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->policy_version(), 0);
  calls.clear();
  auto stats = rig.engine->Step(**objective);
  ASSERT_TRUE(stats.ok()) << stats.status();
  // Five rows in micro-batches of two, each row once; the loss is the
  // batch's, as it was before the step.
  EXPECT_EQ(calls, (std::vector<std::pair<int64_t, int64_t>>{{0, 2}, {2, 4}, {4, 5}}));
  EXPECT_EQ(stats->micro_batches(), 3);
  EXPECT_EQ(stats->trained_tokens(), 15);
  EXPECT_NEAR(stats->loss(), before->loss(), 1e-5);
  EXPECT_EQ(stats->policy_version(), 1);
  EXPECT_EQ(rig.engine->version(), 1);
  EXPECT_EQ(rig.engine->phase(PhaseId::kSft).steps, 1);
  EXPECT_GT(stats->grad_norm(), 0);
  EXPECT_GT(stats->optimizer_state_bytes(), 0);
  // The step pushed the targets' log-probs down.
  auto after = rig.engine->Measure(**objective);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_LT(after->loss(), before->loss());
}

TEST(ObjectiveTest, MicroBatchesAccumulateToTheFullBatchStep) {
  // SGD: the step is the gradient's, which accumulation must not change.
  v1::JobConfig job = TinyJob(/*micro_batch=*/8);
  job.mutable_sft()->mutable_optimizer()->set_name(v1::OptimizerConfig::SGD);
  Rig whole(job);
  job.mutable_grpo()->set_micro_batch_size(1);
  Rig split(job);
  std::vector<std::pair<int64_t, int64_t>> calls;
  const v1::SftBatch batch = Batch();
  for (Rig* rig : {&whole, &split}) {
    UnlikelihoodObjective objective(rig->Input(batch), &calls);
    ASSERT_TRUE(rig->engine->Step(objective).ok());
  }
  const auto a = whole.models->policy()->NamedWeights();
  const auto b = split.models->policy()->NamedWeights();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::allclose(a[i].second, b[i].second, 1e-4, 1e-6)) << a[i].first;
  }
}

TEST(ObjectiveTest, RegistryPrefersTheRecipesOwnObjective) {
  Rig rig(TinyJob(2));
  std::vector<std::pair<int64_t, int64_t>> every, own;
  ObjectiveRegistry registry;
  ASSERT_TRUE(registry.Register({BatchKind::kSft, std::nullopt}, Unlikelihood(&every)).ok());
  ASSERT_TRUE(registry.Register({BatchKind::kSft, Recipe::kDpo}, Unlikelihood(&own)).ok());
  const v1::SftBatch batch = Batch();
  for (Recipe recipe : {Recipe::kDpo, Recipe::kGrpo}) {
    auto objective = registry.New(recipe, rig.Input(batch));
    ASSERT_TRUE(objective.ok()) << objective.status();
    ASSERT_TRUE((*objective)->Loss(0, 1).ok());
  }
  EXPECT_EQ(own.size(), 1);
  EXPECT_EQ(every.size(), 1);
}

TEST(ObjectiveTest, RegistryRefusesATakenKeyAndNamesAMissingOne) {
  Rig rig(TinyJob(2));
  std::vector<std::pair<int64_t, int64_t>> calls;
  ObjectiveRegistry registry;
  ASSERT_TRUE(registry.Register({BatchKind::kTrain, Recipe::kPpo}, Unlikelihood(&calls)).ok());
  EXPECT_EQ(registry.Register({BatchKind::kTrain, Recipe::kPpo}, Unlikelihood(&calls)).code(),
            absl::StatusCode::kAlreadyExists);
  const v1::SftBatch batch = Batch();
  auto missing = registry.New(Recipe::kSft, rig.Input(batch));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("SFT batches under recipe sft"), std::string::npos)
      << missing.status();
}

// The SFT warm-up of a mixture of experts trains its routers' balance too:
// the loss grows by router_aux_loss_coef times the load-balancing loss.
TEST(ObjectiveTest, SftOfAMixtureAddsTheLoadBalancingLoss) {
  ObjectiveRegistry registry;
  ASSERT_TRUE(RegisterBuiltinObjectives(registry).ok());
  const v1::SftBatch batch = Batch();
  std::vector<MicroResult> results;
  for (float coef : {0.0f, 0.5f}) {
    v1::JobConfig job = TinyJob(8);
    job.mutable_model()->set_num_experts(4);
    job.mutable_model()->set_experts_per_token(2);
    job.mutable_model()->set_router_aux_loss_coef(coef);
    Rig rig(job);
    auto objective = registry.New(Recipe::kSft, rig.Input(batch));
    ASSERT_TRUE(objective.ok()) << objective.status();
    absl::StatusOr<MicroResult> r = (*objective)->Loss(0, batch.pairs_size());
    ASSERT_TRUE(r.ok()) << r.status();
    results.push_back(*r);
  }
  const double aux = results[0].router_aux_loss_sum;
  EXPECT_GT(aux, 0);
  EXPECT_DOUBLE_EQ(results[1].router_aux_loss_sum, aux);
  EXPECT_NEAR(results[1].loss.item<double>() - results[0].loss.item<double>(), 0.5 * aux, 1e-5);
}

TEST(ObjectiveTest, BuiltinsRegisterOnce) {
  ObjectiveRegistry registry;
  ASSERT_TRUE(RegisterBuiltinObjectives(registry).ok());
  EXPECT_EQ(RegisterBuiltinObjectives(registry).code(), absl::StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace trellis::learner::internal
