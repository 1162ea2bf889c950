// LoRA on one base (model/shared_base.h): in one process the learner holds
// the frozen base, and the actor and the reference read it instead of
// copies of their own. Each role's ledger objects count the base once, and
// sharing changes no number: the actor samples and the reference scores
// exactly as with bases of their own.

#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>

#include "actor/local_actor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "learner/local_learner.h"
#include "lora_job.h"
#include "ledger/ledger.h"
#include "model/policy.h"
#include "model/shared_base.h"
#include "reference/reference_worker.h"
#include "text/tokenizer.h"
#include "weightsync/inprocess_transport.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAreArray;

constexpr uint64_t kSeed = 7;

// The bytes each role last recorded for each object.
class Objects {
 public:
  explicit Objects(ledger::Ledger& ledger) {
    ledger.ForwardRecords([this](std::string_view role, const ledger::ForwardedRecord& record) {
      if (const auto* object = std::get_if<ledger::ForwardedObject>(&record)) {
        bytes_[{std::string(role), object->object}] = object->bytes;
      }
    });
  }
  int64_t at(const std::string& role, ledger::Object object) const {
    const auto it = bytes_.find({role, object});
    return it == bytes_.end() ? -1 : it->second;
  }

 private:
  std::map<std::pair<std::string, ledger::Object>, int64_t> bytes_;
};

class LoraSharedBaseTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(testing::TempDir()) / "lora_shared_base_test";
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    learner::LocalLearnerOptions options;
    options.vocab_size = tokenizer_->vocab_size();
    options.pad_id = tokenizer_->pad_id();
    options.seed = kSeed;
    options.shared_base = base_;
    auto learner = learner::NewLocalLearner(job_, options, publisher_.get(), &ledger_);
    ASSERT_TRUE(learner.ok()) << learner.status();
    learner_ = *std::move(learner);
  }

  std::unique_ptr<actor::RolloutWorker> Actor(std::shared_ptr<const model::SharedBase> base,
                                              const std::string& id) {
    actor::LocalActorOptions options;
    options.worker_id = id;
    options.lora = job_.memory().lora();
    options.seed = kSeed;
    options.shared_base = std::move(base);
    auto actor = actor::NewLocalActor(job_.model(), tokenizer_.get(), receivers_.emplace_back(
                                          publisher_->NewReceiver()).get(), &ledger_, options);
    EXPECT_TRUE(actor.ok()) << actor.status();
    return actor.ok() ? *std::move(actor) : nullptr;
  }

  std::unique_ptr<reference::ReferenceWorker> Reference(
      std::shared_ptr<const model::SharedBase> base) {
    auto reference = reference::NewLocalReference(job_, tokenizer_.get(), &ledger_, {}, base);
    EXPECT_TRUE(reference.ok()) << reference.status();
    return reference.ok() ? *std::move(reference) : nullptr;
  }

  // The frozen base's bytes, as one copy holds them.
  int64_t BaseBytes() const {
    absl::StatusOr<model::Transformer> policy =
        model::NewPolicy(job_.model(), job_.memory().lora(), tokenizer_->vocab_size(), kSeed);
    EXPECT_TRUE(policy.ok()) << policy.status();
    int64_t bytes = 0;
    for (const auto& [name, tensor] : (*policy)->BaseWeights()) bytes += tensor.nbytes();
    return bytes;
  }

  v1::JobConfig job_ = Job(4);
  std::unique_ptr<text::Tokenizer> tokenizer_ = text::NewCharTokenizer();
  ledger::Ledger ledger_;
  Objects ledger_objects_{ledger_};
  std::shared_ptr<model::SharedBase> base_ = std::make_shared<model::SharedBase>();
  std::unique_ptr<weightsync::InProcessPublisher> publisher_ =
      weightsync::NewInProcessPublisher();
  std::vector<std::unique_ptr<weightsync::Receiver>> receivers_;
  std::unique_ptr<learner::LearnerWorker> learner_;
  fs::path dir_;
};

TEST_F(LoraSharedBaseTest, TheActorReadsTheLearnersBaseAndSamplesTheSame) {
  auto shared = Actor(base_, "actor-0");
  auto own = Actor(nullptr, "actor-1");
  ASSERT_NE(shared, nullptr);
  ASSERT_NE(own, nullptr);
  ASSERT_GT(BaseBytes(), 0);
  EXPECT_EQ(ledger_objects_.at("actor-0", ledger::Object::kParameters), 0);
  EXPECT_EQ(ledger_objects_.at("actor-1", ledger::Object::kParameters), BaseBytes());

  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(learner_->SftStep(RandomSft(16, tokenizer_->vocab_size(), 100 + step)).ok());
  }
  absl::StatusOr<v1::WeightSyncStats> sent = learner_->PublishWeights();
  ASSERT_TRUE(sent.ok()) << sent.status();
  ASSERT_TRUE(shared->SyncWeights(sent->version()).ok());
  ASSERT_TRUE(own->SyncWeights(sent->version()).ok());
  absl::StatusOr<v1::GenerateResponse> a = shared->Generate(Request(*tokenizer_));
  absl::StatusOr<v1::GenerateResponse> b = own->Generate(Request(*tokenizer_));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->samples_size(), b->samples_size());
  for (int i = 0; i < a->samples_size(); ++i) {
    EXPECT_THAT(a->samples(i).response_tokens(), ElementsAreArray(b->samples(i).response_tokens()))
        << i;
    EXPECT_THAT(a->samples(i).logprobs(), ElementsAreArray(b->samples(i).logprobs())) << i;
  }
}

// Taken before any adapter trained (a LoRA run's GRPO from its base), the
// reference is the base itself; taken after (an SFT warm-up on the
// adapters), it is another model and keeps a copy of its own.
TEST_F(LoraSharedBaseTest, TheReferenceIsTheBaseUntilTheAdaptersTrain) {
  const std::string path = (dir_ / "reference.safetensors").string();
  ASSERT_TRUE(learner_->SaveWeights(path).ok());
  auto shared = Reference(base_);
  auto own = Reference(nullptr);
  ASSERT_NE(shared, nullptr);
  ASSERT_NE(own, nullptr);
  ASSERT_TRUE(shared->Load(path).ok());
  EXPECT_EQ(ledger_objects_.at("reference-0", ledger::Object::kReferenceModel), 0);
  ASSERT_TRUE(own->Load(path).ok());
  EXPECT_EQ(ledger_objects_.at("reference-0", ledger::Object::kReferenceModel), BaseBytes());

  v1::LogProbRequest request;
  for (int i = 0; i < 3; ++i) {
    v1::Sample* s = request.add_samples();
    const std::vector<int32_t> prompt = *tokenizer_->Encode("12+7=");
    const std::vector<int32_t> response = *tokenizer_->Encode(i == 0 ? "19" : "2");
    s->mutable_prompt_tokens()->Add(prompt.begin(), prompt.end());
    s->mutable_response_tokens()->Add(response.begin(), response.end());
  }
  absl::StatusOr<v1::LogProbResponse> a = shared->LogProbs(request);
  absl::StatusOr<v1::LogProbResponse> b = own->LogProbs(request);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  for (int i = 0; i < request.samples_size(); ++i) {
    EXPECT_THAT(a->sequences(i).logprobs(), ElementsAreArray(b->sequences(i).logprobs())) << i;
  }

  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(learner_->SftStep(RandomSft(16, tokenizer_->vocab_size(), 100 + step)).ok());
  }
  ASSERT_TRUE(learner_->SaveWeights(path).ok());
  ASSERT_TRUE(shared->Load(path).ok());
  EXPECT_EQ(ledger_objects_.at("reference-0", ledger::Object::kReferenceModel), BaseBytes());
}

}  // namespace
}  // namespace trellis
