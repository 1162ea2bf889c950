#include "actor/testing/actor_conformance.h"

#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "model/testing/failing_allocator.h"
#include "model/testing/small_model.h"
#include "model/transformer.h"

namespace trellis::actor::conformance {
namespace {

using ::absl::StatusCode;
using ::testing::HasSubstr;

constexpr int kMaxNewTokens = 6;

::testing::AssertionResult SameSamples(const v1::GenerateResponse& a,
                                       const v1::GenerateResponse& b) {
  if (a.samples_size() != b.samples_size()) {
    return ::testing::AssertionFailure() << a.samples_size() << " vs " << b.samples_size();
  }
  for (int i = 0; i < a.samples_size(); ++i) {
    if (a.samples(i).SerializeAsString() != b.samples(i).SerializeAsString()) {
      return ::testing::AssertionFailure() << "sample " << i << " differs";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace

std::string ActorFactoryName(const ::testing::TestParamInfo<ActorFactory>& info) {
  return info.param.name;
}

void ActorConformanceTest::SetUp() {
  tokenizer_ = text::NewCharTokenizer();
  publisher_ = weightsync::NewInProcessPublisher();
  receiver_ = publisher_->NewReceiver();
  setup_ = {model::testing::SmallConfig(), tokenizer_.get(), receiver_.get(), "actor-0"};
  absl::StatusOr<BoundActor> bound = GetParam().make(setup_);
  ASSERT_TRUE(bound.ok()) << bound.status();
  bound_ = *std::move(bound);
}

void ActorConformanceTest::Publish(int64_t version) {
  torch::manual_seed(100 + version);
  model::Transformer policy(setup_.model, tokenizer_->vocab_size());
  absl::StatusOr<v1::WeightSyncStats> published =
      publisher_->Publish(version, policy->NamedWeights());
  ASSERT_TRUE(published.ok()) << published.status();
}

v1::GenerateRequest ActorConformanceTest::Request(int prompts, int n, uint64_t seed,
                                                  int length) const {
  const std::vector<int32_t> chars = *tokenizer_->Encode("0123456789+-=");
  v1::GenerateRequest request;
  request.set_responses_per_prompt(n);
  request.set_seed(seed);
  request.mutable_sampling()->set_temperature(1.0);
  request.mutable_sampling()->set_top_p(1.0);
  request.mutable_sampling()->set_max_new_tokens(kMaxNewTokens);
  for (int p = 0; p < prompts; ++p) {
    v1::Prompt* prompt = request.add_prompts();
    prompt->set_id(10 + p);
    prompt->add_token_ids(*tokenizer_->bos_id());
    for (int k = 1; k < length; ++k) prompt->add_token_ids(chars[(p * 3 + k) % chars.size()]);
  }
  return request;
}

TEST_P(ActorConformanceTest, GenerateBeforeAnyWeightsIsFailedPrecondition) {
  EXPECT_EQ(actor().policy_version(), -1);
  absl::StatusOr<v1::GenerateResponse> early = actor().Generate(Request(2, 2, 1));
  EXPECT_EQ(early.status().code(), StatusCode::kFailedPrecondition) << early.status();
}

TEST_P(ActorConformanceTest, SyncWeightsBringsTheRequestedVersionOrNewer) {
  Publish(0);
  absl::StatusOr<v1::WeightSyncStats> first = actor().SyncWeights(0);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->version(), 0);
  EXPECT_EQ(actor().policy_version(), 0);
  Publish(2);
  absl::StatusOr<v1::WeightSyncStats> second = actor().SyncWeights(1);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->version(), 2);
  EXPECT_EQ(actor().policy_version(), 2);
  // Asking for an older version keeps the newer one.
  absl::StatusOr<v1::WeightSyncStats> older = actor().SyncWeights(1);
  ASSERT_TRUE(older.ok()) << older.status();
  EXPECT_EQ(older->version(), 2);
  EXPECT_EQ(actor().policy_version(), 2);
}

TEST_P(ActorConformanceTest, SamplesEveryPromptInOrderTaggedWithTheirVersion) {
  Publish(3);
  ASSERT_TRUE(actor().SyncWeights(3).ok());
  const v1::GenerateRequest request = Request(5, 3, 7);
  absl::StatusOr<v1::GenerateResponse> out = actor().Generate(request);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->samples_size(), 15);
  int64_t generated = 0;
  for (int i = 0; i < out->samples_size(); ++i) {
    const v1::Sample& s = out->samples(i);
    const v1::Prompt& prompt = request.prompts(i / 3);
    EXPECT_EQ(s.prompt_id(), prompt.id()) << "sample " << i;
    EXPECT_EQ(s.index(), i % 3) << "sample " << i;
    EXPECT_EQ(s.policy_version(), 3);
    EXPECT_TRUE(std::equal(s.prompt_tokens().begin(), s.prompt_tokens().end(),
                           prompt.token_ids().begin(), prompt.token_ids().end()));
    ASSERT_GE(s.response_tokens_size(), 1);
    EXPECT_LE(s.response_tokens_size(), kMaxNewTokens);
    EXPECT_EQ(s.logprobs_size(), s.response_tokens_size());
    for (float lp : s.logprobs()) EXPECT_LE(lp, 0.0f);
    const bool ended = tokenizer().IsEos(s.response_tokens(s.response_tokens_size() - 1));
    EXPECT_EQ(s.truncated(), !ended);
    generated += s.response_tokens_size();
  }
  EXPECT_EQ(out->generated_tokens(), generated);
}

TEST_P(ActorConformanceTest, SameSeedSameSamplesOtherSeedOthers) {
  Publish(0);
  ASSERT_TRUE(actor().SyncWeights(0).ok());
  absl::StatusOr<v1::GenerateResponse> a = actor().Generate(Request(4, 4, 9));
  absl::StatusOr<v1::GenerateResponse> b = actor().Generate(Request(4, 4, 9));
  absl::StatusOr<v1::GenerateResponse> c = actor().Generate(Request(4, 4, 10));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_TRUE(SameSamples(*a, *b));
  EXPECT_FALSE(SameSamples(*a, *c));
}

TEST_P(ActorConformanceTest, NewWeightsChangeTheSamples) {
  Publish(0);
  ASSERT_TRUE(actor().SyncWeights(0).ok());
  absl::StatusOr<v1::GenerateResponse> before = actor().Generate(Request(4, 4, 9));
  Publish(1);
  ASSERT_TRUE(actor().SyncWeights(1).ok());
  absl::StatusOr<v1::GenerateResponse> after = actor().Generate(Request(4, 4, 9));
  ASSERT_TRUE(before.ok() && after.ok());
  EXPECT_FALSE(SameSamples(*before, *after));
  EXPECT_EQ(after->samples(0).policy_version(), 1);
}

TEST_P(ActorConformanceTest, StreamingHandsOverWholeGroupsOfTheSameSamples) {
  Publish(0);
  ASSERT_TRUE(actor().SyncWeights(0).ok());
  const v1::GenerateRequest request = Request(12, 2, 5);
  std::vector<v1::GenerateResponse> parts;
  absl::Mutex mu;
  absl::StatusOr<v1::GenerateResponse> all =
      actor().GenerateStreaming(request, [&](const v1::GenerateResponse& part) {
        absl::MutexLock lock(&mu);
        parts.push_back(part);
      });
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->samples_size(), 24);
  ASSERT_FALSE(parts.empty());
  std::map<uint64_t, std::string> streamed;  // prompt id -> its group, serialized
  for (const v1::GenerateResponse& part : parts) {
    std::map<uint64_t, int> per_prompt;
    for (const v1::Sample& s : part.samples()) {
      ++per_prompt[s.prompt_id()];
      streamed[s.prompt_id()] += s.SerializeAsString();
    }
    for (const auto& [id, count] : per_prompt) EXPECT_EQ(count, 2) << "prompt " << id;
  }
  std::map<uint64_t, std::string> returned;
  for (const v1::Sample& s : all->samples()) returned[s.prompt_id()] += s.SerializeAsString();
  EXPECT_EQ(streamed, returned);
  absl::StatusOr<v1::GenerateResponse> plain = actor().Generate(request);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_TRUE(SameSamples(*all, *plain));
}

// GenerateRequest.decode_token_budget bounds the decode batch, not the
// sampled tokens; the response says the bound used (a pool: the sum over the
// actors it asked) and the seconds spent decoding.
TEST_P(ActorConformanceTest, ARequestsDecodeBudgetChangesNoSampleAndComesBack) {
  Publish(0);
  ASSERT_TRUE(actor().SyncWeights(0).ok());
  v1::GenerateRequest request = Request(4, 4, 9);
  absl::StatusOr<v1::GenerateResponse> whole = actor().Generate(request);
  request.set_decode_token_budget(3);
  absl::StatusOr<v1::GenerateResponse> bounded = actor().Generate(request);
  ASSERT_TRUE(whole.ok() && bounded.ok());
  // The tokens exactly; log-probs within float noise (other batch shapes).
  ASSERT_EQ(bounded->samples_size(), whole->samples_size());
  for (int i = 0; i < whole->samples_size(); ++i) {
    const auto& want = whole->samples(i).response_tokens();
    const auto& got = bounded->samples(i).response_tokens();
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin(), want.end())) << "sample " << i;
  }
  EXPECT_EQ(whole->decode_token_budget(), 0);
  EXPECT_GE(bounded->decode_token_budget(), 3);
  EXPECT_EQ(bounded->decode_token_budget() % 3, 0);
  EXPECT_GT(bounded->decode_seconds(), 0);
}

TEST_P(ActorConformanceTest, NoPromptsNoSamples) {
  Publish(0);
  ASSERT_TRUE(actor().SyncWeights(0).ok());
  absl::StatusOr<v1::GenerateResponse> out = actor().Generate(Request(0, 4, 1));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->samples_size(), 0);
}

TEST_P(ActorConformanceTest, PromptTooLongIsInvalidArgumentNamingIt) {
  Publish(0);
  ASSERT_TRUE(actor().SyncWeights(0).ok());
  v1::GenerateRequest request = Request(3, 2, 1);
  // max_seq_len is 32: 30 prompt tokens and 6 new ones do not fit.
  *request.mutable_prompts(2) = Request(1, 2, 1, 30).prompts(0);
  request.mutable_prompts(2)->set_id(77);
  absl::StatusOr<v1::GenerateResponse> out = actor().Generate(request);
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument) << out.status();
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("prompt 77"));
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("max_seq_len"));

  v1::GenerateRequest no_new_tokens = Request(2, 2, 1);
  no_new_tokens.mutable_sampling()->set_max_new_tokens(0);
  EXPECT_EQ(actor().Generate(no_new_tokens).status().code(), StatusCode::kInvalidArgument);
  // The actor goes on.
  EXPECT_TRUE(actor().Generate(Request(2, 2, 1)).ok());
}

TEST_P(ActorConformanceTest, LibTorchOutOfMemoryIsResourceExhaustedAndTheActorGoesOn) {
  Publish(0);
  ASSERT_TRUE(actor().SyncWeights(0).ok());
  absl::StatusOr<v1::GenerateResponse> out;
  {
    model::testing::FailingCpuAllocator failing;
    out = actor().Generate(Request(2, 2, 1));
  }
  EXPECT_EQ(out.status().code(), StatusCode::kResourceExhausted) << out.status();
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("actor-0 Generate: out of memory"));
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("injected out of memory"));
  EXPECT_TRUE(actor().Generate(Request(2, 2, 1)).ok());
}

}  // namespace trellis::actor::conformance
