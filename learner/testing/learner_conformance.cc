#include "learner/testing/learner_conformance.h"

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "gmock/gmock.h"
#include "model/safetensors.h"
#include "model/testing/failing_allocator.h"
#include "model/transformer.h"

namespace trellis::learner::conformance {
namespace {

using ::absl::StatusCode;
using ::testing::HasSubstr;

// The tensors of the safetensors file at `path`, by name.
std::map<std::string, torch::Tensor> Tensors(const std::string& path) {
  absl::StatusOr<model::NamedTensors> named = model::LoadSafetensors(path);
  EXPECT_TRUE(named.ok()) << named.status();
  std::map<std::string, torch::Tensor> out;
  if (named.ok()) {
    for (auto& [name, t] : *named) out[name] = t;
  }
  return out;
}

::testing::AssertionResult SameTensors(const std::map<std::string, torch::Tensor>& a,
                                       const std::map<std::string, torch::Tensor>& b) {
  if (a.size() != b.size()) {
    return ::testing::AssertionFailure() << a.size() << " vs " << b.size() << " tensors";
  }
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    if (it == b.end() || !torch::equal(t, it->second)) {
      return ::testing::AssertionFailure() << "tensor '" << name << "' differs";
    }
  }
  return ::testing::AssertionSuccess();
}

// Copies checkpoint `from` into a new directory `to`.
void CopyDir(const std::string& from, const std::string& to) {
  std::filesystem::remove_all(to);
  std::filesystem::copy(from, to);
}

}  // namespace

std::string LearnerFactoryName(const ::testing::TestParamInfo<LearnerFactory>& info) {
  return info.param.name;
}

void LearnerConformanceTest::SetUp() {
  tokenizer_ = text::NewCharTokenizer();
  publisher_ = weightsync::NewInProcessPublisher();
  receiver_ = publisher_->NewReceiver();
  absl::StatusOr<BoundLearner> bound = GetParam().make(GetParam().job, publisher_.get());
  ASSERT_TRUE(bound.ok()) << bound.status();
  bound_ = *std::move(bound);
}

std::vector<int32_t> LearnerConformanceTest::Ids(const std::string& text) const {
  return *tokenizer_->Encode(text);
}

std::string LearnerConformanceTest::TempPath(const std::string& name) const {
  std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::replace(test.begin(), test.end(), '/', '_');
  const std::string dir = ::testing::TempDir() + "/learner_conformance_" + test;
  std::filesystem::create_directories(dir);
  return dir + "/" + name;
}

v1::SftBatch LearnerConformanceTest::Sft(int salt) const {
  v1::SftBatch batch;
  for (int i = 0; i < 4; ++i) {
    const int a = salt + i, b = 2 * i + 1;
    v1::SftBatch::Pair* pair = batch.add_pairs();
    pair->add_prompt_tokens(*tokenizer_->bos_id());
    for (int32_t id : Ids(std::to_string(a) + "+" + std::to_string(b) + "=")) {
      pair->add_prompt_tokens(id);
    }
    for (int32_t id : Ids(std::to_string(a + b))) pair->add_target_tokens(id);
    pair->add_target_tokens(tokenizer_->eos_id());
  }
  return batch;
}

v1::TrainBatch LearnerConformanceTest::Train(int salt) const {
  v1::TrainBatch batch;
  for (int i = 0; i < 8; ++i) {
    v1::TrainSample* s = batch.add_samples();
    s->add_prompt_tokens(*tokenizer_->bos_id());
    for (int32_t id : Ids(std::to_string(salt) + "+" + std::to_string(i / 4) + "=")) {
      s->add_prompt_tokens(id);
    }
    for (int32_t id : Ids(std::to_string(salt * 7 + i))) {
      s->add_response_tokens(id);
      s->add_old_logprobs(-2.5f);
      s->add_ref_logprobs(-2.5f);
    }
    s->set_advantage(i % 2 == 0 ? 1.0f : -1.0f);
    s->set_reward(i % 2 == 0 ? 1.0f : 0.0f);
  }
  return batch;
}

v1::PreferenceBatch LearnerConformanceTest::Preference(int salt) const {
  v1::PreferenceBatch batch;
  for (int i = 0; i < 4; ++i) {
    v1::PreferencePair* p = batch.add_pairs();
    p->add_prompt_tokens(*tokenizer_->bos_id());
    for (int32_t id : Ids(std::to_string(salt + i) + "+1=")) p->add_prompt_tokens(id);
    for (int32_t id : Ids(std::to_string(salt + i + 1))) p->add_chosen_tokens(id);
    for (int32_t id : Ids(std::to_string(salt + i + 2))) p->add_rejected_tokens(id);
    p->set_ref_chosen_logprob(-3.0);
    p->set_ref_rejected_logprob(-3.0);
  }
  return batch;
}

TEST_P(LearnerConformanceTest, VersionStartsAtZeroAndGrowsByOnePerOptimizerStep) {
  EXPECT_EQ(learner().policy_version(), 0);
  absl::StatusOr<v1::TrainStats> sft = learner().SftStep(Sft(1));
  ASSERT_TRUE(sft.ok()) << sft.status();
  EXPECT_GT(sft->loss(), 0);
  EXPECT_EQ(learner().policy_version(), 1);
  absl::StatusOr<v1::TrainStats> rl = learner().TrainStep(Train(1));
  ASSERT_TRUE(rl.ok()) << rl.status();
  EXPECT_EQ(learner().policy_version(), 2);
  absl::StatusOr<v1::TrainStats> pref = learner().PreferenceStep(Preference(1));
  ASSERT_TRUE(pref.ok()) << pref.status();
  EXPECT_EQ(learner().policy_version(), 3);

  // Evaluation measures, the same twice, and takes no step.
  absl::StatusOr<v1::TrainStats> eval = learner().EvalSft(Sft(5));
  absl::StatusOr<v1::TrainStats> again = learner().EvalSft(Sft(5));
  ASSERT_TRUE(eval.ok() && again.ok()) << eval.status() << again.status();
  EXPECT_EQ(eval->loss(), again->loss());
  EXPECT_GT(eval->loss(), 0);
  absl::StatusOr<v1::TrainStats> eval_pref = learner().EvalPreference(Preference(5));
  ASSERT_TRUE(eval_pref.ok()) << eval_pref.status();
  EXPECT_EQ(learner().policy_version(), 3);
}

TEST_P(LearnerConformanceTest, BadBatchesAreInvalidArgumentNamingTheItemAndTakeNoStep) {
  absl::StatusOr<v1::TrainStats> empty = learner().SftStep(v1::SftBatch());
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument) << empty.status();
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("empty batch"));

  v1::TrainBatch short_logprobs = Train(1);
  short_logprobs.mutable_samples(3)->mutable_old_logprobs()->RemoveLast();
  absl::StatusOr<v1::TrainStats> rl = learner().TrainStep(short_logprobs);
  EXPECT_EQ(rl.status().code(), StatusCode::kInvalidArgument) << rl.status();
  EXPECT_THAT(std::string(rl.status().message()), HasSubstr("train sample 3"));

  v1::PreferenceBatch no_chosen = Preference(1);
  no_chosen.mutable_pairs(2)->clear_chosen_tokens();
  absl::StatusOr<v1::TrainStats> pref = learner().PreferenceStep(no_chosen);
  EXPECT_EQ(pref.status().code(), StatusCode::kInvalidArgument) << pref.status();
  EXPECT_THAT(std::string(pref.status().message()), HasSubstr("pair 2"));

  EXPECT_EQ(learner().policy_version(), 0);
  EXPECT_TRUE(learner().SftStep(Sft(1)).ok());
  EXPECT_EQ(learner().policy_version(), 1);
}

TEST_P(LearnerConformanceTest, PublishesAndSavesTheCurrentWeights) {
  ASSERT_TRUE(learner().SftStep(Sft(1)).ok());
  absl::StatusOr<v1::WeightSyncStats> published = learner().PublishWeights();
  ASSERT_TRUE(published.ok()) << published.status();
  EXPECT_EQ(published->version(), 1);
  model::Transformer received(GetParam().job.model(), tokenizer().vocab_size());
  absl::StatusOr<v1::WeightSyncStats> got =
      receiver().Receive(1, received->NamedWeights(), absl::Seconds(30));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->version(), 1);

  const std::string path = TempPath("policy.safetensors");
  ASSERT_TRUE(learner().SaveWeights(path).ok());
  std::map<std::string, torch::Tensor> sent;
  for (const auto& [name, t] : received->NamedWeights()) sent[name] = t.detach();
  EXPECT_TRUE(SameTensors(Tensors(path), sent));
}

TEST_P(LearnerConformanceTest, CheckpointRoundTripRestoresExactly) {
  ASSERT_TRUE(learner().SftStep(Sft(1)).ok());
  ASSERT_TRUE(learner().TrainStep(Train(1)).ok());
  const std::string dir = TempPath("checkpoint");
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(learner().SaveCheckpoint(dir).ok());
  const std::string saved = TempPath("saved.safetensors");
  ASSERT_TRUE(learner().SaveWeights(saved).ok());
  absl::StatusOr<v1::TrainStats> first = learner().TrainStep(Train(2));
  absl::StatusOr<v1::TrainStats> second = learner().TrainStep(Train(3));
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(learner().policy_version(), 4);

  absl::Status restored = learner().RestoreCheckpoint(dir);
  ASSERT_TRUE(restored.ok()) << restored;
  EXPECT_EQ(learner().policy_version(), 2);
  const std::string again = TempPath("restored.safetensors");
  ASSERT_TRUE(learner().SaveWeights(again).ok());
  EXPECT_TRUE(SameTensors(Tensors(saved), Tensors(again)));
  // The optimizer state came back too: the same steps give the same stats.
  absl::StatusOr<v1::TrainStats> first_again = learner().TrainStep(Train(2));
  absl::StatusOr<v1::TrainStats> second_again = learner().TrainStep(Train(3));
  ASSERT_TRUE(first_again.ok() && second_again.ok());
  EXPECT_EQ(first_again->loss(), first->loss());
  EXPECT_EQ(second_again->loss(), second->loss());
  EXPECT_EQ(second_again->grad_norm(), second->grad_norm());
}

TEST_P(LearnerConformanceTest, RestoreRefusesACheckpointThatDoesNotFitAndChangesNothing) {
  ASSERT_TRUE(learner().SftStep(Sft(1)).ok());
  const std::string dir = TempPath("checkpoint");
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(learner().SaveCheckpoint(dir).ok());
  ASSERT_TRUE(learner().SftStep(Sft(2)).ok());
  absl::StatusOr<v1::TrainStats> before = learner().EvalSft(Sft(5));
  ASSERT_TRUE(before.ok()) << before.status();

  const std::string truncated = TempPath("truncated");
  CopyDir(dir, truncated);
  std::filesystem::resize_file(truncated + "/weights.safetensors", 100);
  absl::Status lost = learner().RestoreCheckpoint(truncated);
  EXPECT_EQ(lost.code(), StatusCode::kDataLoss) << lost;
  EXPECT_THAT(std::string(lost.message()), HasSubstr("weights.safetensors"));

  const std::string reshaped = TempPath("reshaped");
  CopyDir(dir, reshaped);
  std::map<std::string, std::string> meta;
  absl::StatusOr<model::NamedTensors> weights =
      model::LoadSafetensors(reshaped + "/weights.safetensors", &meta);
  ASSERT_TRUE(weights.ok()) << weights.status();
  (*weights)[0].second = torch::zeros({3, 5});
  ASSERT_TRUE(model::SaveSafetensors(reshaped + "/weights.safetensors", *weights, meta).ok());
  absl::Status misfit = learner().RestoreCheckpoint(reshaped);
  EXPECT_EQ(misfit.code(), StatusCode::kFailedPrecondition) << misfit;
  EXPECT_THAT(std::string(misfit.message()), HasSubstr("weights.safetensors"));

  EXPECT_EQ(learner().policy_version(), 2);
  absl::StatusOr<v1::TrainStats> after = learner().EvalSft(Sft(5));
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->loss(), before->loss());
}

// A LibTorch error inside a step comes back as the step's status, naming
// the learner, and takes no step. (Out of memory should be
// ResourceExhausted, as model::StatusFromException makes it; the update
// engine still catches c10::Error itself as Internal.)
TEST_P(LearnerConformanceTest, LibTorchOutOfMemoryIsAStatusAndTakesNoStep) {
  absl::StatusOr<v1::TrainStats> out;
  {
    model::testing::FailingCpuAllocator failing;
    out = learner().SftStep(Sft(1));
  }
  EXPECT_THAT(out.status().code(),
              ::testing::AnyOf(StatusCode::kResourceExhausted, StatusCode::kInternal))
      << out.status();
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("learner-0"));
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("injected out of memory"));
  EXPECT_EQ(learner().policy_version(), 0);
}

}  // namespace trellis::learner::conformance
