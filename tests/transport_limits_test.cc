// Limits at the transport: a request larger than its role's receive limit
// (config::MaxRequestBytes) is refused by gRPC before any of it is parsed,
// and within it a request of many small entries (5,000,000 empty Verify
// items in 10 MB, 2,000,000 empty prompts in 4 MB) is refused by the count
// of its entries, taken on the wire before it is parsed
// (rpc/counted_request.h). Requests are sent as raw bytes, so that the test
// itself never builds the millions of messages it sends.

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/client_unary_call.h>

#include <atomic>
#include <memory>
#include <string>

#include "actor/actor_service.h"
#include "config/request_limits.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "learner/learner_service.h"
#include "rpc/channel.h"
#include "rpc/counted_request.h"
#include "rpc/server.h"
#include "scheduler/scheduler_service.h"
#include "verifier/internal/result.h"
#include "verifier/verifier_service.h"

namespace trellis {
namespace {

using ::testing::HasSubstr;

// Scores everything CORRECT and counts the items it saw.
class CountingVerifier final : public verifier::Verifier {
 public:
  v1::VerifyResult Verify(const v1::VerifyItem&) const override {
    ++items;
    return verifier::internal::Result(v1::CORRECT, 1, "");
  }
  mutable std::atomic<int> items{0};
};

// `n` entries of length-delimited field `field` (1: Verify's items,
// Generate's prompts, a batch's samples; 2: a ledger report's records),
// each `entry` (a serialized message), the first `first` when given.
std::string Entries(int64_t n, const std::string& entry = "", const std::string& first = "",
                    int field = 1) {
  std::string raw;
  raw.reserve(static_cast<size_t>(n) * (2 + entry.size()) + first.size() + 2);
  for (int64_t i = 0; i < n; ++i) {
    const std::string& e = i == 0 && !first.empty() ? first : entry;
    raw.push_back(static_cast<char>(field << 3 | 2));
    raw.push_back(static_cast<char>(e.size()));
    raw += e;
  }
  return raw;
}

// Sends `raw` as the request of `method` ("/trellis.v1.Verifier/Verify")
// and returns the call's status; a server-streaming method's replies are
// read and dropped.
grpc::Status CallRaw(grpc::Channel& channel, const char* method, bool server_streaming,
                     const std::string& raw) {
  grpc::ClientContext context;
  rpc::SetDeadline(context, absl::Seconds(120));
  grpc::Slice slice(raw);
  grpc::ByteBuffer request(&slice, 1);
  using grpc::internal::RpcMethod;
  if (!server_streaming) {
    grpc::ByteBuffer reply;
    return grpc::internal::BlockingUnaryCall(&channel, RpcMethod(method, RpcMethod::NORMAL_RPC),
                                             &context, request, &reply);
  }
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
          &channel, RpcMethod(method, RpcMethod::SERVER_STREAMING), &context, request));
  grpc::ByteBuffer reply;
  while (reader->Read(&reply)) {
  }
  return reader->Finish();
}

class TransportLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    v1::ModelConfig model;
    model.set_max_seq_len(32);
    const config::RequestLimits limits = config::RequestLimitsFor(model, 100);
    actor_.Bind(nullptr, limits);
    learner_.Bind(nullptr, limits, ::testing::TempDir());
    verifier_ = std::make_shared<CountingVerifier>();
    verifier_service_ = verifier::NewVerifierService(verifier_);
    absl::StatusOr<std::unique_ptr<rpc::Server>> server = rpc::Server::Start(
        "127.0.0.1:0", {&actor_, &learner_, verifier_service_.get(), &scheduler_});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = rpc::NewChannel(server_->address());
  }

  actor::ActorService actor_{"actor-0"};
  learner::LearnerService learner_{"learner-0"};
  scheduler::SchedulerService scheduler_{absl::Seconds(1)};
  std::shared_ptr<CountingVerifier> verifier_;
  std::unique_ptr<v1::Verifier::Service> verifier_service_;
  std::unique_ptr<rpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

// The first item's prompt is not UTF-8, so parsing the request would fail
// (INTERNAL): the count's refusal shows it came before any parse.
TEST_F(TransportLimitsTest, FiveMillionEmptyVerifyItemsAreRefusedBeforeTheyAreParsed) {
  const std::string unparsable = std::string("\x0a\x01\xff", 3);  // prompt: "\xff"
  const grpc::Status s =
      CallRaw(*channel_, "/trellis.v1.Verifier/Verify", false, Entries(5000000, "", unparsable));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_EQ(s.error_message(),
            "items: 5000000 items in one request; the limit is 65536 (split the batch)");
  EXPECT_EQ(verifier_->items.load(), 0);
  // Within the count the same request is parsed, and refused as unparsable.
  const grpc::Status parsed =
      CallRaw(*channel_, "/trellis.v1.Verifier/Verify", false, Entries(3, "", unparsable));
  EXPECT_EQ(parsed.error_code(), grpc::StatusCode::INTERNAL) << parsed.error_message();
  // And a request within the limits is verified as before.
  const std::string item = std::string("\x12\x01" "2" "\x1a\x01" "2", 6);  // response, answer
  EXPECT_TRUE(CallRaw(*channel_, "/trellis.v1.Verifier/Verify", false, Entries(2, item)).ok());
  EXPECT_EQ(verifier_->items.load(), 2);
}

TEST_F(TransportLimitsTest, TwoMillionEmptyPromptsAreRefusedBeforeTheyAreParsed) {
  const std::string unparsable = std::string("\x12\x01\xff", 3);  // text: "\xff"
  const grpc::Status s =
      CallRaw(*channel_, "/trellis.v1.Actor/Generate", true, Entries(2000000, "", unparsable));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_EQ(s.error_message(), "prompts: 2000000 prompts in one request; the limit is 16384");
  // Within the count the request is parsed and reaches the (missing) worker.
  const grpc::Status within = CallRaw(*channel_, "/trellis.v1.Actor/Generate", true, Entries(1));
  EXPECT_EQ(within.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << within.error_message();
}

TEST_F(TransportLimitsTest, BatchesAndReportsAreCountedBeforeTheyAreParsed) {
  const grpc::Status samples =
      CallRaw(*channel_, "/trellis.v1.Learner/TrainStep", false, Entries(1000000));
  EXPECT_EQ(samples.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(samples.error_message(), HasSubstr("samples: 1000000 entries in one request"));
  const grpc::Status records =
      CallRaw(*channel_, "/trellis.v1.Scheduler/ReportLedger", false, Entries(1000000, "", "", 2));
  EXPECT_EQ(records.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(records.error_message(), HasSubstr("records: 1000000 records in one request"));
  const grpc::Status malformed =
      CallRaw(*channel_, "/trellis.v1.Learner/TrainStep", false, std::string("\x0a\x05", 2));
  EXPECT_EQ(malformed.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(malformed.error_message(), HasSubstr("not a well-formed message"));
}

// Each role's receive limit is its count limit times the bytes an entry
// takes on average (docs/services.md).
TEST(MaxRequestBytesTest, DerivedFromTheCountLimits) {
  const config::RequestLimits limits;
  EXPECT_EQ(config::MaxRequestBytes(v1::VERIFIER), limits.max_verify_items * 1024);
  EXPECT_EQ(config::MaxRequestBytes(v1::ACTOR), limits.max_prompts * 4096);
  EXPECT_EQ(config::MaxRequestBytes(v1::LEARNER), limits.max_batch_tokens * 4);
  EXPECT_EQ(config::MaxRequestBytes(v1::REFERENCE), limits.max_batch_tokens * 4);
  EXPECT_EQ(config::MaxRequestBytes(v1::SCHEDULER), limits.max_ledger_records * 256);
  EXPECT_LE(config::MaxRequestBytes(v1::LEARNER), rpc::kMaxMessageBytes);
}

// A request one byte over the verifier's receive limit is refused by gRPC
// (RESOURCE_EXHAUSTED) before its handler runs; one at the limit is taken.
TEST(MaxRequestBytesTest, ARequestJustOverTheBoundIsRefusedUnread) {
  auto scorer = std::make_shared<CountingVerifier>();
  std::unique_ptr<v1::Verifier::Service> service = verifier::NewVerifierService(scorer);
  rpc::ServerOptions options;
  options.max_receive_bytes = config::MaxRequestBytes(v1::VERIFIER);
  absl::StatusOr<std::unique_ptr<rpc::Server>> server =
      rpc::Server::Start("127.0.0.1:0", {service.get()}, options);
  ASSERT_TRUE(server.ok()) << server.status();
  std::shared_ptr<grpc::Channel> channel = rpc::NewChannel((*server)->address());
  // Unknown field 15 (skipped by the count and the parse) pads the request
  // to exactly `bytes`: tag, a 4-byte length, the padding.
  const auto padded = [](int64_t bytes) {
    const int64_t body = bytes - 5;
    std::string raw = "\x7a";
    for (int i = 0; i < 4; ++i) {
      raw.push_back(static_cast<char>(((body >> (7 * i)) & 0x7f) | (i < 3 ? 0x80 : 0)));
    }
    raw.append(static_cast<size_t>(body), ' ');
    return raw;
  };
  const int64_t bound = config::MaxRequestBytes(v1::VERIFIER);
  const grpc::Status over = CallRaw(*channel, "/trellis.v1.Verifier/Verify", false,
                                    padded(bound + 1));
  EXPECT_EQ(over.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << over.error_message();
  EXPECT_THAT(over.error_message(), HasSubstr(std::to_string(bound)));
  EXPECT_TRUE(
      CallRaw(*channel, "/trellis.v1.Verifier/Verify", false, padded(bound)).ok());
  EXPECT_EQ(scorer->items.load(), 0);
}

}  // namespace
}  // namespace trellis
