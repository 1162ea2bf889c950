// Roles on a CUDA device against the same roles on the CPU
// (docs/gpu.md, "Devices and placements"): a learner step, the actor's
// greedy rollout, and a short GRPO job embedded in each placement. Every
// test skips, naming the reason, where no CUDA device is visible.

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/device.h"
#include "model/safetensors.h"
#include "roles/local_roles.h"
#include "run/embedded_job.h"
#include "tests/tiny_job.h"
#include "text/tokenizer.h"
#include "weightsync/inprocess_transport.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;

constexpr char kNoCuda[] = "no CUDA device visible: torch::cuda::is_available() is false";

v1::JobConfig On(v1::JobConfig job, v1::RuntimeConfig::Device device,
                 v1::DeploymentConfig::Placement placement = v1::DeploymentConfig::DISAGGREGATED) {
  job.mutable_runtime()->set_device(device);
  job.mutable_deployment()->set_placement(placement);
  return job;
}

fs::path TempDir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("gpu_roles_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::vector<int32_t> Ids(const text::Tokenizer& tokenizer, const std::string& text) {
  std::vector<int32_t> ids = {*tokenizer.bos_id()};
  for (int32_t id : *tokenizer.Encode(text)) ids.push_back(id);
  return ids;
}

// A GRPO batch of arithmetic answers with advantages of both signs.
v1::TrainBatch Batch(const text::Tokenizer& tokenizer) {
  v1::TrainBatch batch;
  for (int i = 0; i < 8; ++i) {
    v1::TrainSample* s = batch.add_samples();
    for (int32_t id : Ids(tokenizer, absl::StrCat(i, "+", i % 3, "="))) s->add_prompt_tokens(id);
    for (int32_t id : *tokenizer.Encode(absl::StrCat(i + i % 3 + i % 2))) {
      s->add_response_tokens(id);
      s->add_old_logprobs(-2.5f);
      s->add_ref_logprobs(-2.5f);
    }
    s->set_advantage(i % 2 == 0 ? 1.0f : -1.0f);
    s->set_reward(i % 2 == 0 ? 1.0f : 0.0f);
  }
  return batch;
}

struct Step {
  v1::TrainStats stats;
  model::NamedTensors weights;
};

// One GRPO step of a fresh learner of `job`; its stats and updated weights.
Step LearnerStep(const v1::JobConfig& job, const text::Tokenizer& tokenizer,
                 const fs::path& weights) {
  std::unique_ptr<weightsync::InProcessPublisher> publisher = weightsync::NewInProcessPublisher();
  auto learner = roles::MakeLocalLearner(job, tokenizer, publisher.get(), nullptr, "learner-0");
  EXPECT_TRUE(learner.ok()) << learner.status();
  if (!learner.ok()) return {};
  absl::StatusOr<v1::TrainStats> stats = (*learner)->TrainStep(Batch(tokenizer));
  EXPECT_TRUE(stats.ok()) << stats.status();
  EXPECT_TRUE((*learner)->SaveWeights(weights.string()).ok());
  absl::StatusOr<model::NamedTensors> saved = model::LoadSafetensors(weights.string());
  EXPECT_TRUE(saved.ok()) << saved.status();
  return {stats.ok() ? *stats : v1::TrainStats(), saved.ok() ? *saved : model::NamedTensors()};
}

// (a) The same step on both devices: the loss within 1e-4 (relative), and
// the updated weights within 1e-5 but for AdamW's first step on gradients
// within float noise of zero, whose sign may differ (a move of up to
// 2 x lr): at most 0.1% of the elements, each within 2.5 x lr.
TEST(GpuRolesTest, LearnerStepOnCudaEqualsTheCpuStep) {
  if (model::VisibleCudaDevices() == 0) GTEST_SKIP() << kNoCuda;
  const fs::path dir = TempDir("learner");
  std::unique_ptr<text::Tokenizer> tokenizer = text::NewCharTokenizer();
  const v1::JobConfig job = testing_util::TinyJob();
  const Step cpu = LearnerStep(On(job, v1::RuntimeConfig::CPU), *tokenizer, dir / "cpu");
  const Step cuda = LearnerStep(On(job, v1::RuntimeConfig::CUDA), *tokenizer, dir / "cuda");
  EXPECT_NEAR(cuda.stats.loss(), cpu.stats.loss(),
              1e-4 * std::max(1.0, std::abs(cpu.stats.loss())));
  ASSERT_EQ(cpu.weights.size(), cuda.weights.size());
  const double lr = job.grpo().optimizer().lr();
  int64_t elements = 0, apart = 0;
  for (size_t i = 0; i < cpu.weights.size(); ++i) {
    SCOPED_TRACE(cpu.weights[i].first);
    ASSERT_EQ(cpu.weights[i].first, cuda.weights[i].first);
    const torch::Tensor diff = (cpu.weights[i].second - cuda.weights[i].second).abs();
    EXPECT_LE(diff.max().item<double>(), 2.5 * lr);
    elements += diff.numel();
    apart += (diff > 1e-5).sum().item<int64_t>();
  }
  EXPECT_LE(apart, elements / 1000) << apart << " of " << elements << " weights differ by > 1e-5";
}

// (c) Greedy decoding from the same weights gives the same tokens on both
// devices, and log-probs within 1e-4.
TEST(GpuRolesTest, GreedyRolloutOnCudaGivesTheCpuTokens) {
  if (model::VisibleCudaDevices() == 0) GTEST_SKIP() << kNoCuda;
  std::unique_ptr<text::Tokenizer> tokenizer = text::NewCharTokenizer();
  const v1::JobConfig job = testing_util::TinyJob();
  std::unique_ptr<weightsync::InProcessPublisher> publisher = weightsync::NewInProcessPublisher();
  auto learner = roles::MakeLocalLearner(On(job, v1::RuntimeConfig::CPU), *tokenizer,
                                         publisher.get(), nullptr, "learner-0");
  ASSERT_TRUE(learner.ok()) << learner.status();
  ASSERT_TRUE((*learner)->PublishWeights().ok());

  v1::GenerateRequest request;
  for (int i = 0; i < 6; ++i) {
    v1::Prompt* p = request.add_prompts();
    p->set_id(i);
    for (int32_t id : Ids(*tokenizer, absl::StrCat(i * 7, "+", i, "="))) p->add_token_ids(id);
  }
  request.set_responses_per_prompt(2);
  request.mutable_sampling()->set_greedy(true);
  request.mutable_sampling()->set_max_new_tokens(6);
  request.set_seed(3);

  std::vector<v1::GenerateResponse> responses;
  std::vector<std::unique_ptr<weightsync::Receiver>> receivers;
  for (const auto device : {v1::RuntimeConfig::CPU, v1::RuntimeConfig::CUDA}) {
    receivers.push_back(publisher->NewReceiver());
    auto actor = roles::MakeLocalActor(On(job, device), tokenizer.get(), receivers.back().get(),
                                       nullptr, "actor-0");
    ASSERT_TRUE(actor.ok()) << actor.status();
    ASSERT_TRUE((*actor)->SyncWeights(0).ok());
    absl::StatusOr<v1::GenerateResponse> response = (*actor)->Generate(request);
    ASSERT_TRUE(response.ok()) << response.status();
    responses.push_back(*response);
  }
  ASSERT_EQ(responses[0].samples_size(), responses[1].samples_size());
  for (int i = 0; i < responses[0].samples_size(); ++i) {
    const v1::Sample& cpu = responses[0].samples(i);
    const v1::Sample& cuda = responses[1].samples(i);
    SCOPED_TRACE(i);
    ASSERT_EQ(std::vector<int32_t>(cpu.response_tokens().begin(), cpu.response_tokens().end()),
              std::vector<int32_t>(cuda.response_tokens().begin(), cuda.response_tokens().end()));
    for (int k = 0; k < cpu.logprobs_size(); ++k) {
      EXPECT_NEAR(cpu.logprobs(k), cuda.logprobs(k), 1e-4);
    }
  }
}

// The mean training reward of a run's steps.
double MeanReward(const fs::path& dir) {
  double sum = 0;
  int steps = 0;
  for (const auto& [step, record] : testing_util::StepRecords(dir)) {
    sum += record["mean_reward"].get<double>();
    ++steps;
  }
  return steps > 0 ? sum / steps : -1;
}

// (b) A short GRPO job embedded on the GPU, in each placement, learns as on
// the CPU: its mean training reward over the steps within 0.15 of the CPU
// run's (the samples part ways once float noise flips a draw).
TEST(GpuRolesTest, GrpoJobOnCudaLearnsAsOnCpuInEachPlacement) {
  if (model::VisibleCudaDevices() == 0) GTEST_SKIP() << kNoCuda;
  const fs::path dir = TempDir("grpo");
  const v1::JobConfig job = testing_util::VaryingRewardsJob(/*steps=*/4);
  std::ostringstream progress;
  ASSERT_TRUE(
      run::RunEmbeddedJob(On(job, v1::RuntimeConfig::CPU), (dir / "cpu").string(), progress).ok());
  const double cpu = MeanReward(dir / "cpu");
  for (const auto placement :
       {v1::DeploymentConfig::DISAGGREGATED, v1::DeploymentConfig::COLOCATED}) {
    const fs::path out =
        dir / (placement == v1::DeploymentConfig::COLOCATED ? "colocated" : "disaggregated");
    SCOPED_TRACE(out.string());
    const absl::Status s =
        run::RunEmbeddedJob(On(job, v1::RuntimeConfig::CUDA, placement), out.string(), progress);
    ASSERT_TRUE(s.ok()) << s << "\n" << progress.str();
    EXPECT_EQ(testing_util::StepRecords(out).size(), 4u);
    EXPECT_NEAR(MeanReward(out), cpu, 0.15);
  }
}

}  // namespace
}  // namespace trellis
