// Oversized requests to every role service are refused at the top of the
// handler (config/request_limits.h), with RESOURCE_EXHAUSTED or
// INVALID_ARGUMENT naming the field and the limit, before anything is
// allocated for them: the role services here are bound to no worker, so a
// request that passed the checks would get FAILED_PRECONDITION ("no
// assignment yet") instead, and the verifier counts every item it is asked
// to score. (The scheduler's: tests/services_test.cc.)

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>

#include "actor/actor_service.h"
#include "config/request_limits.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "learner/learner_service.h"
#include "reference/reference_service.h"
#include "rpc/channel.h"
#include "rpc/server.h"
#include "trellis/v1/weights.grpc.pb.h"
#include "verifier/internal/result.h"
#include "verifier/verifier_service.h"
#include "weightsync/grpc_transport.h"

namespace trellis {
namespace {

MATCHER_P2(IsStatus, code, text, "") {
  return arg.code() == code && std::string(arg.message()).find(text) != std::string::npos;
}

template <typename T>
absl::Status StatusOf(const absl::StatusOr<T>& r) {
  return r.status();
}

// Scores everything CORRECT and counts the items it saw.
class CountingVerifier final : public verifier::Verifier {
 public:
  v1::VerifyResult Verify(const v1::VerifyItem&) const override {
    ++items;
    return verifier::internal::Result(v1::CORRECT, 1, "");
  }
  mutable std::atomic<int> items{0};
};

constexpr int kSeqLen = 32;
constexpr int kVocab = 100;

class BoundsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    v1::ModelConfig model;
    model.set_max_seq_len(kSeqLen);
    const config::RequestLimits limits = config::RequestLimitsFor(model, kVocab);
    actor_.Bind(nullptr, limits);
    learner_.Bind(nullptr, limits, ::testing::TempDir());
    reference_.Bind(nullptr, limits, ::testing::TempDir());
    verifier_ = std::make_shared<CountingVerifier>();
    verifier_service_ = verifier::NewVerifierService(verifier_);
    weights_ = weightsync::NewWeightStreamHost();
    absl::StatusOr<std::unique_ptr<rpc::Server>> server =
        rpc::Server::Start("127.0.0.1:0", {&actor_, &learner_, &reference_,
                                           verifier_service_.get(), weights_->service()});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = rpc::NewChannel(server_->address());
  }

  static v1::GenerateRequest OnePrompt(int responses) {
    v1::GenerateRequest request;
    request.set_responses_per_prompt(responses);
    request.mutable_sampling()->set_max_new_tokens(4);
    request.add_prompts()->add_token_ids(1);
    return request;
  }

  actor::ActorService actor_{"actor-0"};
  learner::LearnerService learner_{"learner-0"};
  reference::ReferenceService reference_{"reference-0"};
  std::shared_ptr<CountingVerifier> verifier_;
  std::unique_ptr<v1::Verifier::Service> verifier_service_;
  std::unique_ptr<weightsync::WeightStreamHost> weights_;
  std::unique_ptr<rpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(BoundsTest, GenerateRefusesHugeCountsAndLongSequences) {
  auto actor = actor::NewGrpcActorClient(channel_, "actor-0", absl::Seconds(30));
  // 2^31 - 1 responses in a message of a few bytes: answered at once.
  EXPECT_THAT(StatusOf(actor->Generate(OnePrompt(2147483647))),
              IsStatus(absl::StatusCode::kResourceExhausted,
                       "responses_per_prompt: 2147483647 responses per prompt in one request; "
                       "the limit is 1024"));
  EXPECT_THAT(StatusOf(actor->Generate(OnePrompt(-1))),
              IsStatus(absl::StatusCode::kInvalidArgument, "responses_per_prompt: must be >= 0"));

  v1::GenerateRequest many = OnePrompt(1024);
  for (int i = 0; i < 100; ++i) *many.add_prompts() = many.prompts(0);
  EXPECT_THAT(StatusOf(actor->Generate(many)),
              IsStatus(absl::StatusCode::kResourceExhausted,
                       "prompts x responses_per_prompt: 103424 samples in one request; the "
                       "limit is 65536"));

  v1::GenerateRequest prompts = OnePrompt(1);
  for (int i = 0; i < config::RequestLimits().max_prompts; ++i)
    *prompts.add_prompts() = prompts.prompts(0);
  EXPECT_THAT(StatusOf(actor->Generate(prompts)),
              IsStatus(absl::StatusCode::kResourceExhausted, "prompts: 16385 prompts"));

  v1::GenerateRequest long_answer = OnePrompt(1);
  long_answer.mutable_sampling()->set_max_new_tokens(2147483647);
  EXPECT_THAT(StatusOf(actor->Generate(long_answer)),
              IsStatus(absl::StatusCode::kInvalidArgument,
                       "prompts[0] (prompt 0) with sampling.max_new_tokens: 2147483648 tokens"));

  v1::GenerateRequest big_text = OnePrompt(1);
  big_text.mutable_prompts(0)->set_answer(std::string(2 << 20, 'x'));
  EXPECT_THAT(StatusOf(actor->Generate(big_text)),
              IsStatus(absl::StatusCode::kResourceExhausted, "prompts[0].answer: 2097152 bytes"));

  // Within the limits the request reaches the (missing) worker.
  EXPECT_THAT(StatusOf(actor->Generate(OnePrompt(4))),
              IsStatus(absl::StatusCode::kFailedPrecondition, "no assignment yet"));
}

TEST_F(BoundsTest, LearnerRefusesOversizedBatches) {
  auto learner = learner::NewGrpcLearnerClient(channel_, "learner-0", absl::Seconds(30),
                                              ::testing::TempDir());
  v1::TrainBatch many;
  for (int i = 0; i <= config::RequestLimits().max_batch_samples; ++i) many.add_samples();
  EXPECT_THAT(StatusOf(learner->TrainStep(many)),
              IsStatus(absl::StatusCode::kResourceExhausted,
                       "samples: 65537 entries in one request; the limit is 65536"));

  v1::TrainBatch long_sample;
  v1::TrainSample* s = long_sample.add_samples();
  for (int i = 0; i < kSeqLen; ++i) s->add_prompt_tokens(1);
  s->add_response_tokens(2);
  EXPECT_THAT(StatusOf(learner->TrainStep(long_sample)),
              IsStatus(absl::StatusCode::kInvalidArgument,
                       "samples[0] (token batch row 0): 33 tokens (prompt 32 + response 1); "
                       "model.max_seq_len is 32"));

  v1::SftBatch sft;
  for (int i = 0; i <= config::RequestLimits().max_batch_samples; ++i) sft.add_pairs();
  EXPECT_THAT(StatusOf(learner->SftStep(sft)),
              IsStatus(absl::StatusCode::kResourceExhausted, "pairs: 65537 entries"));
  EXPECT_THAT(StatusOf(learner->EvalSft(sft)),
              IsStatus(absl::StatusCode::kResourceExhausted, "pairs: 65537 entries"));

  v1::PreferenceBatch preference;
  v1::PreferencePair* pair = preference.add_pairs();
  pair->add_prompt_tokens(1);
  pair->add_chosen_tokens(2);
  for (int i = 0; i < kSeqLen; ++i) pair->add_rejected_tokens(3);
  EXPECT_THAT(StatusOf(learner->PreferenceStep(preference)),
              IsStatus(absl::StatusCode::kInvalidArgument, "pairs[0].rejected_tokens: 33 tokens"));
  EXPECT_THAT(StatusOf(learner->EvalPreference(preference)),
              IsStatus(absl::StatusCode::kInvalidArgument, "pairs[0].rejected_tokens: 33 tokens"));

  v1::TrainBatch fits;
  fits.add_samples()->add_prompt_tokens(1);
  EXPECT_THAT(StatusOf(learner->TrainStep(fits)),
              IsStatus(absl::StatusCode::kFailedPrecondition, "no assignment yet"));
}

TEST_F(BoundsTest, ReferenceRefusesOversizedRequests) {
  auto reference = reference::NewGrpcReferenceClient(channel_, "reference-0",
                                                     absl::Seconds(30), ::testing::TempDir());
  v1::LogProbRequest many;
  for (int i = 0; i <= config::RequestLimits().max_batch_samples; ++i) many.add_samples();
  EXPECT_THAT(StatusOf(reference->LogProbs(many)),
              IsStatus(absl::StatusCode::kResourceExhausted, "samples: 65537 entries"));
  v1::LogProbRequest long_sample;
  for (int i = 0; i < 40; ++i) long_sample.add_samples()->add_response_tokens(1);
  for (int i = 0; i < kSeqLen; ++i) long_sample.mutable_samples(39)->add_prompt_tokens(1);
  EXPECT_THAT(StatusOf(reference->Scores(long_sample)),
              IsStatus(absl::StatusCode::kInvalidArgument, "samples[39] (token batch row 39): 33 tokens"));
}

TEST_F(BoundsTest, VerifierRefusesOversizedRequestsBeforeScoringAnything) {
  auto client = verifier::NewGrpcVerifierClient(channel_, "verifier-0", absl::Seconds(30));
  v1::VerifyRequest many;
  for (int i = 0; i <= config::RequestLimits().max_verify_items; ++i) many.add_items();
  EXPECT_THAT(StatusOf(client->Verify(many)),
              IsStatus(absl::StatusCode::kInvalidArgument, "items: 65537 items in one request"));
  v1::VerifyRequest big;
  big.add_items()->set_response("1");
  big.add_items()->set_metadata_json(std::string((1 << 20) + 1, ' '));
  EXPECT_THAT(StatusOf(client->Verify(big)),
              IsStatus(absl::StatusCode::kResourceExhausted,
                       "items[1].metadata_json: 1048577 bytes; the limit is 1048576"));
  EXPECT_EQ(verifier_->items.load(), 0);
}

TEST_F(BoundsTest, WeightFetchRefusesEndlessWaits) {
  auto stub = v1::WeightStream::NewStub(channel_);
  auto fetch = [&stub](int64_t min_version, int64_t wait_ms) {
    v1::FetchWeightsRequest request;
    request.set_min_version(min_version);
    request.set_wait_ms(wait_ms);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    std::unique_ptr<grpc::ClientReader<v1::WeightChunk>> reader = stub->Fetch(&context, request);
    v1::WeightChunk chunk;
    while (reader->Read(&chunk)) {
    }
    return rpc::FromGrpc(reader->Finish());
  };
  EXPECT_THAT(fetch(1, int64_t{1} << 40),
              IsStatus(absl::StatusCode::kInvalidArgument, "wait_ms: 1099511627776; the longest"));
  EXPECT_THAT(fetch(-1, 0), IsStatus(absl::StatusCode::kInvalidArgument, "min_version"));
}

// A message beyond the role's receive limit is refused by gRPC itself.
TEST(ServerLimitTest, MessageBeyondTheReceiveLimitIsResourceExhausted) {
  auto scorer = std::make_shared<CountingVerifier>();
  std::unique_ptr<v1::Verifier::Service> service = verifier::NewVerifierService(scorer);
  rpc::ServerOptions options;
  options.max_receive_bytes = 1 << 20;
  absl::StatusOr<std::unique_ptr<rpc::Server>> server =
      rpc::Server::Start("127.0.0.1:0", {service.get()}, options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = verifier::NewGrpcVerifierClient(rpc::NewChannel((*server)->address()), "verifier-0",
                                                absl::Seconds(30));
  v1::VerifyRequest big;
  big.add_items()->set_response(std::string(1 << 20, 'x'));
  EXPECT_EQ(StatusOf(client->Verify(big)).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(scorer->items.load(), 0);
  EXPECT_LT(config::MaxRequestBytes(v1::SCHEDULER), config::MaxRequestBytes(v1::ACTOR));
  EXPECT_LE(config::MaxRequestBytes(v1::LEARNER), rpc::kMaxMessageBytes);
}

}  // namespace
}  // namespace trellis
