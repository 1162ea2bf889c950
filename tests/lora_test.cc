// LoRA end to end (job.memory.lora): the learner trains only the adapters
// over a frozen base, its gradients and optimizer state shrink to the
// adapters' size, only the adapters (and the base's fingerprint) travel to
// the actors, and an actor samples with exactly the merged policy.

#include "model/lora.h"

#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "actor/local_actor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "learner/local_learner.h"
#include "lora_job.h"
#include "ledger/ledger.h"
#include "model/policy.h"
#include "model/safetensors.h"
#include "model/token_batch.h"
#include "model/transformer.h"
#include "text/tokenizer.h"
#include "weightsync/fingerprint.h"
#include "weightsync/inprocess_transport.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr uint64_t kSeed = 7;

int64_t Bytes(const model::NamedTensors& tensors) {
  int64_t bytes = 0;
  for (const auto& [name, t] : tensors) bytes += t.nbytes();
  return bytes;
}

std::map<std::string, torch::Tensor> ByName(const model::NamedTensors& tensors) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& [name, t] : tensors) out[name] = t.detach().clone();
  return out;
}

class LoraTest : public testing::Test {
 protected:
  void SetUp() override {
    tokenizer_ = text::NewCharTokenizer();
    dir_ = fs::path(testing::TempDir()) / "lora_test";
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }

  std::unique_ptr<learner::LearnerWorker> Learner(const v1::JobConfig& job,
                                                  weightsync::Publisher* publisher,
                                                  ledger::Ledger* ledger = nullptr) {
    learner::LocalLearnerOptions options;
    options.vocab_size = tokenizer_->vocab_size();
    options.pad_id = tokenizer_->pad_id();
    options.seed = kSeed;
    auto learner = learner::NewLocalLearner(job, options, publisher, ledger);
    EXPECT_TRUE(learner.ok()) << learner.status();
    return learner.ok() ? *std::move(learner) : nullptr;
  }

  std::unique_ptr<actor::RolloutWorker> Actor(const v1::JobConfig& job, uint64_t seed,
                                              weightsync::Receiver* receiver) {
    actor::LocalActorOptions options;
    options.lora = job.memory().lora();
    options.seed = seed;
    auto actor = actor::NewLocalActor(job.model(), tokenizer_.get(), receiver, nullptr, options);
    EXPECT_TRUE(actor.ok()) << actor.status();
    return actor.ok() ? *std::move(actor) : nullptr;
  }

  // `steps` SFT steps; the last step's stats.
  v1::TrainStats Train(learner::LearnerWorker& learner, int steps) {
    v1::TrainStats stats;
    for (int step = 0; step < steps; ++step) {
      auto s = learner.SftStep(RandomSft(16, tokenizer_->vocab_size(), 100 + step));
      EXPECT_TRUE(s.ok()) << s.status();
      if (s.ok()) stats = *s;
    }
    return stats;
  }

  std::unique_ptr<text::Tokenizer> tokenizer_;
  fs::path dir_;
};

TEST_F(LoraTest, TrainsOnlyTheAdapters) {
  const v1::JobConfig job = Job(4);
  absl::StatusOr<model::Transformer> start = model::NewPolicy(
      job.model(), job.memory().lora(), tokenizer_->vocab_size(), kSeed);
  ASSERT_TRUE(start.ok()) << start.status();
  const int64_t base_bytes = Bytes((*start)->BaseWeights());
  const int64_t adapter_bytes = Bytes((*start)->AdapterWeights());
  const auto base_before = ByName((*start)->BaseWeights());
  const auto adapters_before = ByName((*start)->AdapterWeights());

  ledger::Ledger ledger;
  std::map<ledger::Object, int64_t> objects;  // the learner's, last recorded
  ledger.ForwardRecords([&](std::string_view, const ledger::ForwardedRecord& record) {
    if (const auto* o = std::get_if<ledger::ForwardedObject>(&record))
      objects[o->object] = o->bytes;
  });
  auto lora = Learner(job, nullptr, &ledger);
  ASSERT_NE(lora, nullptr);
  const v1::TrainStats stats = Train(*lora, 3);

  // The checkpoint holds base and adapters: the base is the starting one
  // bit for bit, every adapter moved.
  ASSERT_TRUE(lora->SaveCheckpoint(dir_.string()).ok());
  auto saved = model::LoadSafetensors((dir_ / "weights.safetensors").string());
  ASSERT_TRUE(saved.ok()) << saved.status();
  ASSERT_EQ(saved->size(), base_before.size() + adapters_before.size());
  for (const auto& [name, t] : *saved) {
    if (model::IsAdapterName(name)) {
      EXPECT_FALSE(torch::equal(t, adapters_before.at(name))) << name << " did not train";
    } else {
      EXPECT_TRUE(torch::equal(t, base_before.at(name))) << name << " changed";
    }
  }

  // Gradients and AdamW's two moments exist for the adapters only; the
  // frozen base is the parameters object, the adapters their own.
  EXPECT_EQ(stats.parameter_bytes(), base_bytes);
  EXPECT_EQ(stats.adapter_bytes(), adapter_bytes);
  EXPECT_EQ(stats.gradient_bytes(), adapter_bytes);
  EXPECT_EQ(stats.optimizer_state_bytes(), 2 * adapter_bytes);
  EXPECT_EQ(objects[ledger::Object::kParameters], base_bytes);
  EXPECT_EQ(objects[ledger::Object::kAdapters], adapter_bytes);
  EXPECT_EQ(objects[ledger::Object::kGradients], adapter_bytes);
  EXPECT_EQ(objects[ledger::Object::kOptimizerState], 2 * adapter_bytes);

  // The same steps training every weight: same parameters, gradients and
  // optimizer state of the whole model, no adapters.
  auto full = Learner(Job(0), nullptr);
  ASSERT_NE(full, nullptr);
  const v1::TrainStats full_stats = Train(*full, 3);
  EXPECT_EQ(full_stats.parameter_bytes(), base_bytes);
  EXPECT_EQ(full_stats.adapter_bytes(), 0);
  EXPECT_EQ(full_stats.gradient_bytes(), base_bytes);
  EXPECT_EQ(full_stats.optimizer_state_bytes(), 2 * base_bytes);
  EXPECT_LT(stats.gradient_bytes() * 10, full_stats.gradient_bytes());
}

// A checkpoint (base, adapters, the adapters' optimizer state) resumes
// exactly; a learner whose base differs refuses it.
TEST_F(LoraTest, CheckpointResumesExactly) {
  const v1::JobConfig job = Job(4);
  auto straight = Learner(job, nullptr);
  ASSERT_NE(straight, nullptr);
  Train(*straight, 2);
  ASSERT_TRUE(straight->SaveCheckpoint(dir_.string()).ok());
  auto resumed = Learner(job, nullptr);
  ASSERT_NE(resumed, nullptr);
  ASSERT_TRUE(resumed->RestoreCheckpoint(dir_.string()).ok());
  EXPECT_EQ(resumed->policy_version(), 2);
  const v1::SftBatch next = RandomSft(16, tokenizer_->vocab_size(), 500);
  ASSERT_TRUE(straight->SftStep(next).ok());
  ASSERT_TRUE(resumed->SftStep(next).ok());
  const fs::path a = dir_ / "a.safetensors", b = dir_ / "b.safetensors";
  ASSERT_TRUE(straight->SaveWeights(a.string()).ok());
  ASSERT_TRUE(resumed->SaveWeights(b.string()).ok());
  auto wa = model::LoadSafetensors(a.string()), wb = model::LoadSafetensors(b.string());
  ASSERT_TRUE(wa.ok() && wb.ok());
  ASSERT_EQ(wa->size(), wb->size());
  for (size_t i = 0; i < wa->size(); ++i) {
    EXPECT_TRUE(torch::equal((*wa)[i].second, (*wb)[i].second)) << (*wa)[i].first;
  }

  learner::LocalLearnerOptions other;
  other.vocab_size = tokenizer_->vocab_size();
  other.seed = kSeed + 1;
  auto stranger = learner::NewLocalLearner(job, other, nullptr, nullptr);
  ASSERT_TRUE(stranger.ok());
  absl::Status s = (*stranger)->RestoreCheckpoint(dir_.string());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("weights.safetensors: its frozen base is not the one"));
  EXPECT_EQ((*stranger)->policy_version(), 0);
}

// After a sync the actor (its own base plus the received adapters) samples
// with the learner's merged policy: the plain model in policy.safetensors
// gives the sampled tokens the same log-probs.
TEST_F(LoraTest, ActorSamplesWithTheMergedPolicy) {
  const v1::JobConfig job = Job(4);
  auto publisher = weightsync::NewInProcessPublisher();
  auto receiver = publisher->NewReceiver();
  auto learner = Learner(job, publisher.get());
  auto actor = Actor(job, kSeed, receiver.get());
  ASSERT_NE(learner, nullptr);
  ASSERT_NE(actor, nullptr);
  Train(*learner, 3);

  absl::StatusOr<v1::WeightSyncStats> sent = learner->PublishWeights();
  ASSERT_TRUE(sent.ok()) << sent.status();
  ASSERT_TRUE(actor->SyncWeights(sent->version()).ok());
  EXPECT_EQ(actor->policy_version(), 3);
  // Only the adapters and the 8-byte fingerprint travel.
  absl::StatusOr<model::Transformer> shape = model::NewPolicy(
      job.model(), job.memory().lora(), tokenizer_->vocab_size(), kSeed);
  ASSERT_TRUE(shape.ok());
  EXPECT_EQ(sent->bytes(), Bytes((*shape)->AdapterWeights()) + 8);
  EXPECT_EQ(sent->tensors(), static_cast<int>((*shape)->AdapterWeights().size()) + 1);

  const v1::GenerateRequest request = Request(*tokenizer_);
  absl::StatusOr<v1::GenerateResponse> out = actor->Generate(request);
  ASSERT_TRUE(out.ok()) << out.status();

  const std::string policy = (dir_ / "policy.safetensors").string();
  ASSERT_TRUE(learner->SaveWeights(policy).ok());
  auto merged = model::LoadSafetensors(policy);
  ASSERT_TRUE(merged.ok()) << merged.status();
  model::Transformer plain(job.model(), tokenizer_->vocab_size());
  ASSERT_TRUE(plain->LoadWeights(*merged).ok()) << "policy.safetensors is not plain Llama";

  torch::NoGradGuard no_grad;
  std::vector<model::SequencePair> pairs;
  for (const v1::Sample& s : out->samples()) {
    pairs.push_back({s.prompt_tokens(), s.response_tokens()});
  }
  absl::StatusOr<model::TokenBatch> tb =
      model::MakeTokenBatch(pairs, tokenizer_->pad_id(), job.model().max_seq_len());
  ASSERT_TRUE(tb.ok()) << tb.status();
  const torch::Tensor logp = model::TargetLogProbs(plain, *tb);
  double max_diff = 0;
  for (int i = 0; i < out->samples_size(); ++i) {
    const std::vector<float> want = model::RowResponseValues(logp, *tb, i);
    const auto& got = out->samples(i).logprobs();
    ASSERT_EQ(static_cast<int>(want.size()), got.size());
    for (int k = 0; k < got.size(); ++k) {
      max_diff = std::max(max_diff, std::abs(static_cast<double>(got[k]) - want[k]));
    }
  }
  // Float32 rounding of two evaluation orders (cached decode vs. one pass).
  EXPECT_LT(max_diff, 1e-4);
  // The adapters matter: the untrained base scores the samples differently.
  model::Transformer base(job.model(), tokenizer_->vocab_size());
  ASSERT_TRUE(base->LoadWeights((*shape)->BaseWeights()).ok());
  EXPECT_GT((model::TargetLogProbs(base, *tb) - logp).abs().max().item<double>(), 1e-3);
}

TEST_F(LoraTest, ActorRefusesAdaptersOfAnotherBase) {
  const v1::JobConfig job = Job(4);
  auto publisher = weightsync::NewInProcessPublisher();
  auto receiver = publisher->NewReceiver();
  auto learner = Learner(job, publisher.get());
  auto actor = Actor(job, kSeed + 1, receiver.get());  // another base
  ASSERT_NE(learner, nullptr);
  ASSERT_NE(actor, nullptr);
  absl::StatusOr<v1::WeightSyncStats> sent = learner->PublishWeights();
  ASSERT_TRUE(sent.ok()) << sent.status();
  absl::StatusOr<v1::WeightSyncStats> got = actor->SyncWeights(sent->version());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(got.status().message(), HasSubstr("actor-0: weight sync to version 0"));
  EXPECT_THAT(got.status().message(), HasSubstr("base with fingerprint"));
  EXPECT_THAT(got.status().message(), HasSubstr("runtime.seed and model.init_checkpoint"));
  EXPECT_EQ(actor->policy_version(), -1);
}

// A model.init_checkpoint (plain Llama weights) is the base of learner and
// actors alike; an actor whose checkpoint is missing fails to start, naming it.
TEST_F(LoraTest, InitCheckpointIsTheBase) {
  v1::JobConfig job = Job(4);
  torch::manual_seed(99);
  model::Transformer pretrained(job.model(), tokenizer_->vocab_size());
  const std::string init = (dir_ / "init.safetensors").string();
  ASSERT_TRUE(model::SaveSafetensors(init, pretrained->NamedWeights()).ok());
  job.mutable_model()->set_init_checkpoint(init);

  auto publisher = weightsync::NewInProcessPublisher();
  auto receiver = publisher->NewReceiver();
  auto learner = Learner(job, publisher.get());
  auto actor = Actor(job, kSeed + 1, receiver.get());  // the seed no longer decides the base
  ASSERT_NE(learner, nullptr);
  ASSERT_NE(actor, nullptr);
  absl::StatusOr<v1::WeightSyncStats> sent = learner->PublishWeights();
  ASSERT_TRUE(sent.ok()) << sent.status();
  EXPECT_TRUE(actor->SyncWeights(sent->version()).ok());

  job.mutable_model()->set_init_checkpoint((dir_ / "missing.safetensors").string());
  actor::LocalActorOptions options;
  options.lora = job.memory().lora();
  auto missing = actor::NewLocalActor(job.model(), tokenizer_.get(), receiver.get(), nullptr,
                                      options);
  EXPECT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("missing.safetensors"));
  EXPECT_THAT(missing.status().message(), HasSubstr("actor-0"));
}

}  // namespace
}  // namespace trellis
