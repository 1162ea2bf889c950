// Tensor-parallel actors and reference (deployment.actor.tensor_parallel,
// deployment.reference.tensor_parallel; model/tensor_parallel.h) against
// K = 1, on the default job's shape and on the grouped-query Hugging Face
// fixture qwen2: the same rollout tokens (greedy and sampled), rollout and
// reference log-probs within 1e-5; and a GRPO job with both at 2, embedded
// and launched, whose per-step rewards are those of the same job at 1.

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actor/local_actor.h"
#include "actor/testing/arithmetic_prompts.h"
#include "gtest/gtest.h"
#include "model/safetensors.h"
#include "model/testing/hf_fixtures.h"
#include "model/testing/tensor_parallel_check.h"
#include "model/transformer.h"
#include "reference/reference_worker.h"
#include "tests/tiny_job.h"
#include "text/tokenizer.h"
#include "weightsync/inprocess_transport.h"

namespace trellis {
namespace {

constexpr double kTolerance = 1e-5;

// A model, its weights, and a character tokenizer of its vocabulary.
struct Policy {
  v1::ModelConfig config;
  model::NamedTensors weights;
  std::unique_ptr<text::Tokenizer> tokenizer;
};

Policy DefaultShapePolicy() {
  Policy p;
  p.config = model::testing::DefaultShape();
  p.tokenizer = text::NewCharTokenizer();
  torch::manual_seed(21);
  p.weights = model::Transformer(p.config, p.tokenizer->vocab_size())->NamedWeights();
  return p;
}

// qwen2 (4 query heads over 2 key/value heads, vocabulary 128), with a
// tokenizer of 3 specials (the fixture's pad, bos and eos ids) and 125
// ASCII characters.
Policy Qwen2Policy() {
  Policy p;
  model::Transformer whole = model::testing::LoadHfTransformer(model::testing::FixtureDir("qwen2"));
  if (whole.is_empty()) return p;
  p.config = whole->config();
  p.weights = whole->NamedWeights();
  std::string alphabet;
  for (char c = 3; c < 127; ++c) alphabet.push_back(c);
  alphabet.push_back(127);
  p.tokenizer = text::NewCharTokenizer(alphabet);
  EXPECT_EQ(p.tokenizer->vocab_size(), 128);
  return p;
}

v1::GenerateRequest Request(const text::Tokenizer& tokenizer, bool greedy) {
  v1::GenerateRequest request;
  request.set_responses_per_prompt(3);
  request.set_seed(17);
  request.mutable_sampling()->set_greedy(greedy);
  request.mutable_sampling()->set_temperature(1.0);
  request.mutable_sampling()->set_top_p(1.0);
  request.mutable_sampling()->set_max_new_tokens(8);
  testing_util::AddArithmeticPrompts(tokenizer, request);
  return request;
}

// `request` on a local actor of tensor_parallel `k` holding `policy`'s
// weights (received through an in-process weight sync, as in a job).
v1::GenerateResponse Generate(const Policy& policy, int k, const v1::GenerateRequest& request) {
  std::unique_ptr<weightsync::InProcessPublisher> publisher = weightsync::NewInProcessPublisher();
  std::unique_ptr<weightsync::Receiver> receiver = publisher->NewReceiver();
  EXPECT_TRUE(publisher->Publish(0, policy.weights).ok());
  actor::LocalActorOptions options;
  options.tensor_parallel = k;
  absl::StatusOr<std::unique_ptr<actor::RolloutWorker>> actor =
      actor::NewLocalActor(policy.config, policy.tokenizer.get(), receiver.get(), nullptr, options);
  EXPECT_TRUE(actor.ok()) << actor.status();
  if (!actor.ok()) return {};
  absl::StatusOr<v1::WeightSyncStats> synced = (*actor)->SyncWeights(0);
  EXPECT_TRUE(synced.ok()) << synced.status();
  absl::StatusOr<v1::GenerateResponse> out = (*actor)->Generate(request);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : v1::GenerateResponse();
}

// The reference log-probs of `samples` from a local reference of
// tensor_parallel `k` that loaded `policy`'s weights from a file.
v1::LogProbResponse ReferenceLogProbs(const Policy& policy, int k,
                                      const v1::GenerateResponse& samples) {
  const std::string path = ::testing::TempDir() + "/tp_reference.safetensors";
  EXPECT_TRUE(model::SaveSafetensors(path, policy.weights).ok());
  v1::JobConfig job = testing_util::TinyJob();
  *job.mutable_model() = policy.config;
  job.mutable_deployment()->mutable_reference()->set_tensor_parallel(k);
  absl::StatusOr<std::unique_ptr<reference::ReferenceWorker>> ref =
      reference::NewLocalReference(job, policy.tokenizer.get(), nullptr);
  EXPECT_TRUE(ref.ok()) << ref.status();
  if (!ref.ok()) return {};
  absl::Status loaded = (*ref)->Load(path);
  EXPECT_TRUE(loaded.ok()) << loaded;
  v1::LogProbRequest request;
  *request.mutable_samples() = samples.samples();
  absl::StatusOr<v1::LogProbResponse> out = (*ref)->LogProbs(request);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : v1::LogProbResponse();
}

double LargestDifference(const google::protobuf::RepeatedField<float>& a,
                         const google::protobuf::RepeatedField<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double largest = 0;
  for (int i = 0; i < std::min(a.size(), b.size()); ++i) {
    largest = std::max(largest, static_cast<double>(std::abs(a[i] - b[i])));
  }
  return largest;
}

// Actors and references of 1 and 2 ranks on `policy`.
void ExpectTwoRanksAsOne(const Policy& policy, const std::string& what) {
  ASSERT_NE(policy.tokenizer, nullptr);
  for (bool greedy : {true, false}) {
    const v1::GenerateRequest request = Request(*policy.tokenizer, greedy);
    const v1::GenerateResponse one = Generate(policy, 1, request);
    const v1::GenerateResponse two = Generate(policy, 2, request);
    ASSERT_EQ(one.samples_size(), 9);
    ASSERT_EQ(two.samples_size(), 9);
    double rollout = 0, reference = 0;
    for (int i = 0; i < 9; ++i) {
      EXPECT_EQ(two.samples(i).response_text(), one.samples(i).response_text()) << i;
      ASSERT_TRUE(std::equal(
          one.samples(i).response_tokens().begin(), one.samples(i).response_tokens().end(),
          two.samples(i).response_tokens().begin(), two.samples(i).response_tokens().end()))
          << what << " greedy " << greedy << " sample " << i;
      rollout = std::max(rollout,
                         LargestDifference(one.samples(i).logprobs(), two.samples(i).logprobs()));
    }
    const v1::LogProbResponse ref_one = ReferenceLogProbs(policy, 1, one);
    const v1::LogProbResponse ref_two = ReferenceLogProbs(policy, 2, one);
    ASSERT_EQ(ref_one.sequences_size(), 9);
    ASSERT_EQ(ref_two.sequences_size(), 9);
    for (int i = 0; i < 9; ++i) {
      reference = std::max(reference, LargestDifference(ref_one.sequences(i).logprobs(),
                                                        ref_two.sequences(i).logprobs()));
    }
    EXPECT_LT(rollout, kTolerance);
    EXPECT_LT(reference, kTolerance);
    std::cout << what << (greedy ? " greedy" : " sampled")
              << ": largest log-prob difference, rollouts " << rollout << ", reference "
              << reference << "\n";
  }
}

TEST(TensorParallelJobTest, TwoRankActorAndReferenceOnTheDefaultShape) {
  ExpectTwoRanksAsOne(DefaultShapePolicy(), "default shape");
}

TEST(TensorParallelJobTest, TwoRankActorAndReferenceOnQwen2) {
  ExpectTwoRanksAsOne(Qwen2Policy(), "qwen2");
}

TEST(TensorParallelJobTest, AnUnsplittableShapeIsRefusedNamingIt) {
  Policy policy = DefaultShapePolicy();
  std::unique_ptr<weightsync::InProcessPublisher> publisher = weightsync::NewInProcessPublisher();
  std::unique_ptr<weightsync::Receiver> receiver = publisher->NewReceiver();
  actor::LocalActorOptions options;
  options.tensor_parallel = 3;
  absl::StatusOr<std::unique_ptr<actor::RolloutWorker>> actor =
      actor::NewLocalActor(policy.config, policy.tokenizer.get(), receiver.get(), nullptr, options);
  EXPECT_EQ(actor.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(actor.status().message().find("actor-0: tensor_parallel 3 does not divide"),
            std::string::npos)
      << actor.status();
}

// The tiny job with 4 query heads over 2 key/value heads, after SFT, with
// half credit for a wrong number (testing_util::VaryingRewardsJob: the
// rewards vary within groups, so a difference in any sample would show), 3
// GRPO steps; with the actors and the reference at tensor_parallel `k`.
v1::JobConfig SplittableJob(int k) {
  v1::JobConfig job = testing_util::VaryingRewardsJob(3);
  job.mutable_model()->set_n_heads(4);
  job.mutable_model()->set_n_kv_heads(2);
  job.mutable_deployment()->mutable_actor()->set_tensor_parallel(k);
  job.mutable_deployment()->mutable_reference()->set_tensor_parallel(k);
  return job;
}

// Embedded: at tensor_parallel 2 each step samples as many tokens and
// rewards them as at 1, its KL within float noise.
TEST(TensorParallelJobTest, GrpoStepsRewardAsWithOneRank) {
  const testing_util::JobRun one = testing_util::RunTinyJob("tp_one", SplittableJob(1));
  const testing_util::JobRun two = testing_util::RunTinyJob("tp_two", SplittableJob(2));
  ASSERT_EQ(one.steps.size(), 3u);
  ASSERT_EQ(two.steps.size(), 3u);
  double rewards = 0;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(two.steps[i]["mean_reward"], one.steps[i]["mean_reward"]) << "step " << i;
    EXPECT_EQ(two.steps[i]["generated_tokens"], one.steps[i]["generated_tokens"]) << i;
    EXPECT_NEAR(two.steps[i]["kl"].get<double>(), one.steps[i]["kl"].get<double>(), 1e-5) << i;
    rewards += one.steps[i]["mean_reward"].get<double>();
    std::cout << "step " << i << ": mean reward " << one.steps[i]["mean_reward"] << ", kl "
              << one.steps[i]["kl"] << " (1 rank), " << two.steps[i]["kl"] << " (2 ranks)\n";
  }
  EXPECT_GT(rewards, 0);  // rewards that could differ
}

// `trellis launch` (each role its own process, weights over gloo) at
// tensor_parallel 2: the per-step rewards and sampled tokens of the
// embedded run at 1.
TEST(TensorParallelJobTest, LaunchedRewardsAsWithOneRank) {
  const testing_util::JobRun one = testing_util::RunTinyJob("tp_one_launch", SplittableJob(1));
  const std::filesystem::path root = std::filesystem::path(::testing::TempDir()) / "tp_launch";
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  testing_util::RunTrellis(root, "launch", "launch", SplittableJob(2));
  const std::map<int64_t, nlohmann::json> launched = testing_util::StepRecords(root / "launch");
  ASSERT_EQ(launched.size(), one.steps.size());
  size_t i = 0;
  for (const auto& [step, record] : launched) {
    EXPECT_EQ(record["mean_reward"], one.steps[i]["mean_reward"]) << "step " << step;
    EXPECT_EQ(record["generated_tokens"], one.steps[i]["generated_tokens"]) << "step " << step;
    ++i;
  }
}

}  // namespace
}  // namespace trellis
