#include "actor/local_actor.h"

#include <algorithm>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "model/token_batch.h"
#include "model/transformer.h"
#include "text/tokenizer.h"
#include "weightsync/inprocess_transport.h"

namespace trellis::actor {
namespace {

// A response but for its decode seconds (wall time, different each call).
std::string Content(v1::GenerateResponse response) {
  response.clear_decode_seconds();
  return response.SerializeAsString();
}

class LocalActorTest : public testing::Test {
 protected:
  void SetUp() override {
    config_.set_d_model(32);
    config_.set_n_layers(2);
    config_.set_n_heads(4);
    config_.set_n_kv_heads(2);
    config_.set_d_ff(64);
    config_.set_max_seq_len(20);
    tokenizer_ = text::NewCharTokenizer();
    torch::manual_seed(1);
    policy_ = model::Transformer(config_, tokenizer_->vocab_size());
    publisher_ = weightsync::NewInProcessPublisher();
    receiver_ = publisher_->NewReceiver();
    ASSERT_TRUE(publisher_->Publish(0, policy_->NamedWeights()).ok());
    absl::StatusOr<std::unique_ptr<RolloutWorker>> actor =
        NewLocalActor(config_, tokenizer_.get(), receiver_.get(), nullptr);
    ASSERT_TRUE(actor.ok()) << actor.status();
    actor_ = *std::move(actor);
    ASSERT_TRUE(actor_->SyncWeights(0).ok());
  }

  v1::GenerateRequest Request(int n, uint64_t seed) {
    v1::GenerateRequest request;
    request.set_responses_per_prompt(n);
    request.set_seed(seed);
    request.mutable_sampling()->set_temperature(1.0);
    request.mutable_sampling()->set_top_p(1.0);
    request.mutable_sampling()->set_max_new_tokens(6);
    int id = 0;
    for (const char* text : {"1+2=", "13-40=", "7="}) {
      v1::Prompt* p = request.add_prompts();
      p->set_id(id++);
      p->set_text(text);
      p->add_token_ids(*tokenizer_->bos_id());
      const std::vector<int32_t> ids = *tokenizer_->Encode(text);
      p->mutable_token_ids()->Add(ids.begin(), ids.end());
    }
    return request;
  }

  v1::ModelConfig config_;
  std::unique_ptr<text::Tokenizer> tokenizer_;
  model::Transformer policy_{nullptr};
  std::unique_ptr<weightsync::InProcessPublisher> publisher_;
  std::unique_ptr<weightsync::Receiver> receiver_;
  std::unique_ptr<RolloutWorker> actor_;
};

TEST_F(LocalActorTest, SamplesGroupsTaggedWithVersion) {
  auto out = actor_->Generate(Request(4, 9));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->samples_size(), 12);
  for (int i = 0; i < out->samples_size(); ++i) {
    const v1::Sample& s = out->samples(i);
    EXPECT_EQ(s.prompt_id(), static_cast<uint64_t>(i / 4));
    EXPECT_EQ(s.index(), i % 4);
    EXPECT_EQ(s.policy_version(), 0);
    EXPECT_EQ(s.logprobs_size(), s.response_tokens_size());
    EXPECT_GE(s.response_tokens_size(), 1);
    EXPECT_LE(s.response_tokens_size(), 6);
    const bool ended = tokenizer_->IsEos(s.response_tokens(s.response_tokens_size() - 1));
    EXPECT_EQ(s.truncated(), !ended);
  }
  EXPECT_GT(out->kv_cache_bytes(), 0);
}

// GenerateStreaming hands over each prompt's group once, as soon as its
// rows have ended: groups arrive in the order of their longest response,
// each with exactly the samples of the final response, which is
// Generate's.
TEST_F(LocalActorTest, StreamsEachGroupOnceItsRowsHaveEnded) {
  const v1::GenerateRequest request = Request(4, 9);
  std::vector<v1::GenerateResponse> parts;
  auto all = actor_->GenerateStreaming(
      request, [&](const v1::GenerateResponse& part) { parts.push_back(part); });
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(parts.size(), 3u);
  std::set<uint64_t> prompts;
  int previous_longest = 0;
  for (const v1::GenerateResponse& part : parts) {
    ASSERT_EQ(part.samples_size(), 4);
    const uint64_t prompt = part.samples(0).prompt_id();
    EXPECT_TRUE(prompts.insert(prompt).second) << "prompt " << prompt;
    int longest = 0;
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(part.samples(i).SerializeAsString(),
                all->samples(static_cast<int>(prompt) * 4 + i).SerializeAsString());
      longest = std::max(longest, part.samples(i).response_tokens_size());
    }
    EXPECT_GE(longest, previous_longest) << "prompt " << prompt;
    previous_longest = longest;
  }
  auto plain = actor_->Generate(request);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(Content(*all), Content(*plain));
}

// GenerateRequest.decode_token_budget bounds this request's decode batch
// (its KV cache peaks lower) but not its samples; the response says the
// bound it used and the seconds it decoded.
TEST_F(LocalActorTest, TheRequestsDecodeBudgetBoundsTheBatchNotTheSamples) {
  v1::GenerateRequest request = Request(4, 9);
  auto whole = actor_->Generate(request);
  request.set_decode_token_budget(2);
  auto bounded = actor_->Generate(request);
  ASSERT_TRUE(whole.ok() && bounded.ok());
  EXPECT_EQ(whole->decode_token_budget(), 0);
  EXPECT_EQ(bounded->decode_token_budget(), 2);
  EXPECT_GT(bounded->decode_seconds(), 0);
  EXPECT_LT(bounded->kv_cache_bytes(), whole->kv_cache_bytes());
  ASSERT_EQ(bounded->samples_size(), whole->samples_size());
  for (int i = 0; i < whole->samples_size(); ++i) {
    const auto& want = whole->samples(i).response_tokens();
    const auto& got = bounded->samples(i).response_tokens();
    EXPECT_EQ(std::vector<int32_t>(got.begin(), got.end()),
              std::vector<int32_t>(want.begin(), want.end()))
        << "sample " << i;
  }
}

TEST_F(LocalActorTest, SameSeedSameSamples) {
  auto a = actor_->Generate(Request(4, 9));
  auto b = actor_->Generate(Request(4, 9));
  auto c = actor_->Generate(Request(4, 10));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(Content(*a), Content(*b));
  EXPECT_NE(Content(*a), Content(*c));
}

// The actor's sampling log-probs (left-padded, KV cache) equal the log-probs
// the learner recomputes by teacher forcing (right-padded, no cache).
TEST_F(LocalActorTest, LogProbsMatchTeacherForcedLogProbs) {
  auto out = actor_->Generate(Request(4, 3));
  ASSERT_TRUE(out.ok());
  std::vector<model::SequencePair> pairs;
  for (const auto& s : out->samples()) pairs.push_back({s.prompt_tokens(), s.response_tokens()});
  auto batch = model::MakeTokenBatch(pairs, tokenizer_->pad_id(), 20);
  ASSERT_TRUE(batch.ok());
  torch::NoGradGuard no_grad;
  torch::Tensor logp = model::TargetLogProbs(policy_, *batch);
  for (int i = 0; i < out->samples_size(); ++i) {
    std::vector<float> expected = model::RowResponseValues(logp, *batch, i);
    ASSERT_EQ(expected.size(), static_cast<size_t>(out->samples(i).logprobs_size()));
    for (size_t k = 0; k < expected.size(); ++k) {
      EXPECT_NEAR(out->samples(i).logprobs(k), expected[k], 1e-4) << "sample " << i;
    }
  }
}

TEST_F(LocalActorTest, GreedyIsDeterministicAcrossSeeds) {
  v1::GenerateRequest a = Request(1, 1), b = Request(1, 2);
  a.mutable_sampling()->set_greedy(true);
  b.mutable_sampling()->set_greedy(true);
  auto x = actor_->Generate(a);
  auto y = actor_->Generate(b);
  ASSERT_TRUE(x.ok() && y.ok());
  for (int i = 0; i < x->samples_size(); ++i) {
    EXPECT_EQ(x->samples(i).response_text(), y->samples(i).response_text());
  }
}

TEST_F(LocalActorTest, RejectsPromptsThatDoNotFit) {
  v1::GenerateRequest request = Request(1, 1);
  request.mutable_sampling()->set_max_new_tokens(14);
  auto out = actor_->Generate(request);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("prompt 1"), std::string::npos) << out.status();
}

// A sample ended by a stop sequence keeps it and says which one it was.
TEST_F(LocalActorTest, StopSequencesEndSamplesAndAreNamed) {
  v1::GenerateRequest request = Request(4, 9);
  auto free = actor_->Generate(request);
  ASSERT_TRUE(free.ok()) << free.status();
  const v1::Sample& first = free->samples(0);
  ASSERT_GE(first.response_tokens_size(), 2);
  int32_t unused = 0;  // a token neither of the first two is
  while (unused == first.response_tokens(0) || unused == first.response_tokens(1)) ++unused;
  request.mutable_sampling()->add_stop()->add_token_ids(unused);
  request.mutable_sampling()->add_stop()->add_token_ids(first.response_tokens(1));
  auto out = actor_->Generate(request);
  ASSERT_TRUE(out.ok()) << out.status();
  const v1::Sample& stopped = out->samples(0);
  EXPECT_EQ(stopped.stop_index(), 2);
  EXPECT_FALSE(stopped.truncated());
  ASSERT_LE(stopped.response_tokens_size(), 2);
  EXPECT_EQ(stopped.response_tokens(stopped.response_tokens_size() - 1), first.response_tokens(1));

  request.mutable_sampling()->add_stop();
  auto empty = actor_->Generate(request);
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(empty.status().message().find("sampling.stop[2] is empty"), std::string::npos)
      << empty.status();
}

TEST_F(LocalActorTest, TakesNewWeightsOnlyThroughSync) {
  auto before = actor_->Generate(Request(2, 5));
  {
    torch::NoGradGuard no_grad;
    for (auto& p : policy_->parameters()) p.mul_(1.5);
  }
  auto unchanged = actor_->Generate(Request(2, 5));
  ASSERT_TRUE(publisher_->Publish(1, policy_->NamedWeights()).ok());
  ASSERT_TRUE(actor_->SyncWeights(1).ok());
  EXPECT_EQ(actor_->policy_version(), 1);
  auto after = actor_->Generate(Request(2, 5));
  ASSERT_TRUE(before.ok() && unchanged.ok() && after.ok());
  EXPECT_EQ(Content(*before), Content(*unchanged));
  EXPECT_EQ(after->samples(0).policy_version(), 1);
  EXPECT_NE(before->samples(0).logprobs(0), after->samples(0).logprobs(0));
}

// Two turns of an episode: the second prompt is the first, its response and
// an observation ("ok"). Only the rows that ended on a stop go on.
v1::GenerateRequest NextTurn(const v1::GenerateResponse& first, const text::Tokenizer& tokenizer,
                             int64_t* all_tokens, int64_t* new_tokens) {
  v1::GenerateRequest next;
  next.set_seed(77);
  next.mutable_sampling()->set_temperature(1.0);
  next.mutable_sampling()->set_top_p(1.0);
  next.mutable_sampling()->set_max_new_tokens(4);
  const std::vector<int32_t> observation = *tokenizer.Encode("ok");
  for (const v1::Sample& s : first.samples()) {
    if (s.stop_index() == 0) continue;
    v1::Prompt* p = next.add_prompts();
    p->set_id(100 + next.prompts_size());
    *p->mutable_token_ids() = s.prompt_tokens();
    p->mutable_token_ids()->Add(s.response_tokens().begin(), s.response_tokens().end());
    p->mutable_token_ids()->Add(observation.begin(), observation.end());
    *all_tokens += p->token_ids_size();
    // The response's last token was sampled, never fed: it runs now.
    *new_tokens += 1 + static_cast<int64_t>(observation.size());
  }
  return next;
}

void ExpectSameSamples(const v1::GenerateResponse& a, const v1::GenerateResponse& b) {
  ASSERT_EQ(a.samples_size(), b.samples_size());
  for (int i = 0; i < a.samples_size(); ++i) {
    EXPECT_EQ(a.samples(i).response_text(), b.samples(i).response_text()) << "sample " << i;
    ASSERT_EQ(a.samples(i).logprobs_size(), b.samples(i).logprobs_size());
    for (int k = 0; k < a.samples(i).logprobs_size(); ++k) {
      EXPECT_NEAR(a.samples(i).logprobs(k), b.samples(i).logprobs(k), 1e-5) << "sample " << i;
    }
  }
}

// The turn cache: a continued row prefills only its new tokens and samples
// what an actor without the cache samples; new weights drop the cache.
TEST_F(LocalActorTest, KeepsTheCacheAcrossTurnsUntilTheWeightsChange) {
  std::unique_ptr<weightsync::Receiver> receiver = publisher_->NewReceiver();
  LocalActorOptions options;
  options.turn_cache_bytes = 0;
  absl::StatusOr<std::unique_ptr<RolloutWorker>> plain =
      NewLocalActor(config_, tokenizer_.get(), receiver.get(), nullptr, options);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE((*plain)->SyncWeights(0).ok());
  v1::GenerateRequest first = Request(4, 9);
  first.mutable_sampling()->set_max_new_tokens(4);
  // Every other token stops a row.
  for (int32_t t = 0; t < tokenizer_->vocab_size(); t += 2) {
    if (!tokenizer_->IsEos(t)) first.mutable_sampling()->add_stop()->add_token_ids(t);
  }
  auto turn = actor_->Generate(first);
  auto plain_turn = (*plain)->Generate(first);
  ASSERT_TRUE(turn.ok() && plain_turn.ok());
  int64_t all = 0, fresh = 0;
  const v1::GenerateRequest second = NextTurn(*turn, *tokenizer_, &all, &fresh);
  ASSERT_GE(second.prompts_size(), 4);
  auto cached = actor_->Generate(second);
  auto full = (*plain)->Generate(second);
  ASSERT_TRUE(cached.ok() && full.ok());
  ExpectSameSamples(*cached, *full);
  EXPECT_EQ(full->prefill_tokens(), all);
  EXPECT_EQ(cached->prefill_tokens(), fresh);

  // New weights: the first turn's keys and values are stale.
  ASSERT_TRUE(actor_->Generate(first).ok());
  {
    torch::NoGradGuard no_grad;
    for (auto& p : policy_->parameters()) p.mul_(1.5);
  }
  ASSERT_TRUE(publisher_->Publish(1, policy_->NamedWeights()).ok());
  ASSERT_TRUE(actor_->SyncWeights(1).ok());
  ASSERT_TRUE((*plain)->SyncWeights(1).ok());
  auto after = actor_->Generate(second);
  auto plain_after = (*plain)->Generate(second);
  ASSERT_TRUE(after.ok() && plain_after.ok());
  EXPECT_EQ(after->prefill_tokens(), all);
  ExpectSameSamples(*after, *plain_after);
}

TEST_F(LocalActorTest, RejectsANegativeTurnCacheBudget) {
  LocalActorOptions options;
  options.turn_cache_bytes = -1;
  auto actor = NewLocalActor(config_, tokenizer_.get(), receiver_.get(), nullptr, options);
  EXPECT_EQ(actor.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(actor.status().message().find("turn_cache_bytes"), std::string::npos) << actor.status();
}

// The service passes a predicate that turns true once its caller has gone
// (cancelled, past its deadline): sampling stops at the next decode step.
TEST_F(LocalActorTest, GenerateStopsOnceItsCallerHasGone) {
  int polls = 0;
  auto stopped = actor_->GenerateUntil(Request(4, 9), [&polls] { return ++polls > 1; });
  EXPECT_EQ(stopped.status().code(), absl::StatusCode::kCancelled);
  EXPECT_NE(stopped.status().message().find("after 1 decode steps"), std::string::npos)
      << stopped.status();
  EXPECT_EQ(polls, 2);
  auto gone_before = actor_->GenerateUntil(Request(4, 9), [] { return true; });
  EXPECT_EQ(gone_before.status().code(), absl::StatusCode::kCancelled);
  EXPECT_NE(gone_before.status().message().find("after 0 decode steps"), std::string::npos);
  // A caller that stays gets what Generate gives.
  auto stays = actor_->GenerateUntil(Request(4, 9), [] { return false; });
  auto plain = actor_->Generate(Request(4, 9));
  ASSERT_TRUE(stays.ok() && plain.ok());
  EXPECT_EQ(Content(*stays), Content(*plain));
}

}  // namespace
}  // namespace trellis::actor
