#include "verifier/verifier_service.h"

#include <grpcpp/grpcpp.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/channel.h"
#include "rpc/server.h"

namespace trellis::verifier {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

v1::VerifyRequest Items(std::initializer_list<std::pair<const char*, const char*>> pairs) {
  v1::VerifyRequest request;
  for (const auto& [response, answer] : pairs) {
    v1::VerifyItem* item = request.add_items();
    item->set_prompt("1+1=");
    item->set_response(response);
    item->set_answer(answer);
  }
  return request;
}

std::shared_ptr<const Verifier> Builtin(const std::string& name) {
  VerifierRegistry registry;
  EXPECT_TRUE(RegisterBuiltinVerifiers(registry).ok());
  v1::VerifierConfig config;
  config.set_name(name);
  absl::StatusOr<std::unique_ptr<Verifier>> v = registry.Create(config);
  EXPECT_TRUE(v.ok()) << v.status();
  return std::shared_ptr<const Verifier>(*std::move(v));
}

// A service and its server on 127.0.0.1:0.
struct Served {
  explicit Served(std::unique_ptr<grpc::Service> s) : service(std::move(s)) {
    absl::StatusOr<std::unique_ptr<rpc::Server>> started =
        rpc::Server::Start("127.0.0.1:0", {service.get()});
    EXPECT_TRUE(started.ok()) << started.status();
    server = *std::move(started);
    server->SetServing(true);
  }
  std::unique_ptr<VerifierClient> Client(absl::Duration timeout = absl::Seconds(10)) {
    return NewGrpcVerifierClient(rpc::NewChannel(server->address()), "verifier-0", timeout);
  }
  std::unique_ptr<grpc::Service> service;
  std::unique_ptr<rpc::Server> server;
};

absl::StatusOr<std::unique_ptr<Verifier>> Remote(const std::string& address, int deadline_ms,
                                                  int connect_timeout_ms = 5000) {
  VerifierRegistry registry;
  EXPECT_TRUE(RegisterRemoteVerifier(registry).ok());
  v1::VerifierConfig config;
  config.set_name("remote");
  config.set_address(address);
  config.set_deadline_ms(deadline_ms);
  config.set_connect_timeout_ms(connect_timeout_ms);
  config.set_timeout_reward(-0.5f);
  config.set_reward_wrong(-1.0f);
  return registry.Create(config);
}

TEST(VerifierServiceTest, RoundTripThroughClientAndRemoteVerifier) {
  Served served(NewVerifierService(Builtin("numeric"), "numeric@builtin"));
  const v1::VerifyRequest request = Items({{"2", "2"}, {"3", "2"}, {"no idea", "2"}});

  absl::StatusOr<v1::VerifyResponse> response = served.Client()->Verify(request);
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->results_size(), 3);
  EXPECT_EQ(response->results(0).verdict(), v1::CORRECT);
  EXPECT_EQ(response->results(0).reward(), 1.0f);
  EXPECT_EQ(response->results(0).verifier(), "numeric@builtin");
  EXPECT_EQ(response->results(1).verdict(), v1::WRONG);
  EXPECT_EQ(response->results(2).verdict(), v1::UNPARSEABLE);
  EXPECT_THAT(response->results(2).detail(), HasSubstr("no number"));

  absl::StatusOr<std::unique_ptr<Verifier>> remote = Remote(served.server->address(), 5000);
  ASSERT_TRUE(remote.ok()) << remote.status();
  std::vector<v1::VerifyResult> results = (*remote)->VerifyBatch(request.items());
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].verdict(), v1::CORRECT);
  EXPECT_EQ(results[1].verdict(), v1::WRONG);
  EXPECT_EQ(results[2].verdict(), v1::UNPARSEABLE);
  EXPECT_EQ((*remote)->Verify(request.items(0)).verdict(), v1::CORRECT);
  EXPECT_TRUE((*remote)->VerifyBatch({}).empty());

  absl::StatusOr<v1::VerifyResponse> empty = served.Client()->Verify(v1::VerifyRequest());
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->results_size(), 0);
}

TEST(VerifierServiceTest, OversizedRequestIsInvalidArgumentAndTheServerKeepsServing) {
  VerifierServiceOptions options;
  options.limits.max_verify_items = 2;
  Served served(NewVerifierService(Builtin("exact_match"), "", options));
  std::unique_ptr<VerifierClient> client = served.Client();

  absl::StatusOr<v1::VerifyResponse> refused =
      client->Verify(Items({{"a", "a"}, {"b", "b"}, {"c", "c"}}));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("verifier-0 Verify: items: 3 items"));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("the limit is 2"));

  absl::StatusOr<v1::VerifyResponse> ok = client->Verify(Items({{"a", "a"}, {"b", "c"}}));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->results(0).verdict(), v1::CORRECT);
  EXPECT_EQ(ok->results(1).verdict(), v1::WRONG);
}

TEST(VerifierServiceTest, BadItemsGetErrorVerdictsTheRestAreScored) {
  Served served(NewVerifierService(Builtin("exact_match")));
  v1::VerifyRequest request = Items({{"a", "a"}, {"b", "b"}, {"c", "c"}, {"", ""}});
  request.mutable_items(0)->set_metadata_json("{\"source\": \"demo\"}");
  request.mutable_items(1)->set_metadata_json("[1, 2]");
  request.mutable_items(2)->set_metadata_json("{oops");

  absl::StatusOr<v1::VerifyResponse> response = served.Client()->Verify(request);
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->results_size(), 4);
  EXPECT_EQ(response->results(0).verdict(), v1::CORRECT);
  EXPECT_EQ(response->results(1).verdict(), v1::ERROR);
  EXPECT_THAT(response->results(1).detail(), HasSubstr("items[1].metadata_json: a JSON array"));
  EXPECT_EQ(response->results(2).verdict(), v1::ERROR);
  EXPECT_THAT(response->results(2).detail(), HasSubstr("items[2].metadata_json: not valid JSON"));
  // An empty response is a response like any other.
  EXPECT_EQ(response->results(3).verdict(), v1::CORRECT);
}

// Throws on "throw", answers NaN on "nan", leaves the verdict unset on
// "unset", else CORRECT.
class Misbehaving : public Verifier {
 public:
  v1::VerifyResult Verify(const v1::VerifyItem& item) const override {
    if (item.response() == "throw") throw std::runtime_error("boom");
    v1::VerifyResult r;
    if (item.response() == "nan") {
      r.set_verdict(v1::CORRECT);
      r.set_reward(std::numeric_limits<float>::quiet_NaN());
    } else if (item.response() != "unset") {
      r.set_verdict(v1::CORRECT);
      r.set_reward(1);
    }
    return r;
  }
};

TEST(VerifierServiceTest, MisbehavingVerifierFailsOnlyItsItems) {
  Served served(NewVerifierService(std::make_shared<Misbehaving>()));
  absl::StatusOr<v1::VerifyResponse> response =
      served.Client()->Verify(Items({{"fine", ""}, {"throw", ""}, {"nan", ""}, {"unset", ""}}));
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->results_size(), 4);
  EXPECT_EQ(response->results(0).verdict(), v1::CORRECT);
  EXPECT_EQ(response->results(1).verdict(), v1::ERROR);
  EXPECT_THAT(response->results(1).detail(), HasSubstr("boom"));
  EXPECT_EQ(response->results(2).verdict(), v1::ERROR);
  EXPECT_THAT(response->results(2).detail(), HasSubstr("items[2]: malformed verifier result"));
  EXPECT_THAT(response->results(2).detail(), HasSubstr("not finite"));
  EXPECT_TRUE(std::isfinite(response->results(2).reward()));
  EXPECT_EQ(response->results(3).verdict(), v1::ERROR);
  EXPECT_THAT(response->results(3).detail(), HasSubstr("verdict 0"));
}

// Never answers (until the caller gives up), or answers with `results`
// whatever the request.
class FakeService final : public v1::Verifier::Service {
 public:
  explicit FakeService(v1::VerifyResponse canned, bool hang = false, bool unavailable = false)
      : canned_(std::move(canned)), hang_(hang), unavailable_(unavailable) {}
  grpc::Status Verify(grpc::ServerContext* context, const v1::VerifyRequest*,
                      v1::VerifyResponse* response) override {
    if (unavailable_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "draining");
    if (hang_) {
      const absl::Time give_up = absl::Now() + absl::Seconds(30);
      while (!context->IsCancelled() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
      return grpc::Status(grpc::StatusCode::CANCELLED, "caller gave up");
    }
    *response = canned_;
    return grpc::Status::OK;
  }

 private:
  const v1::VerifyResponse canned_;
  const bool hang_;
  const bool unavailable_;
};

TEST(RemoteVerifierTest, ServiceThatNeverAnswersGivesTimeoutWithinDeadline) {
  Served served(std::make_unique<FakeService>(v1::VerifyResponse(), /*hang=*/true));
  absl::StatusOr<std::unique_ptr<Verifier>> remote = Remote(served.server->address(), 300);
  ASSERT_TRUE(remote.ok()) << remote.status();
  const v1::VerifyRequest request = Items({{"2", "2"}, {"3", "2"}});

  const absl::Time start = absl::Now();
  std::vector<v1::VerifyResult> results = (*remote)->VerifyBatch(request.items());
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(300) + absl::Seconds(1));
  ASSERT_EQ(results.size(), 2u);
  for (const v1::VerifyResult& r : results) {
    EXPECT_EQ(r.verdict(), v1::TIMEOUT);
    EXPECT_EQ(r.reward(), -0.5f);
    EXPECT_THAT(r.detail(), StartsWith("timeout: "));
    EXPECT_THAT(r.detail(), HasSubstr(served.server->address()));
  }

  // The scheduler's client reports the missed deadline as its status.
  absl::StatusOr<v1::VerifyResponse> late = served.Client(absl::Milliseconds(200))->Verify(request);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(late.status().message()), StartsWith("verifier-0 Verify"));
}

TEST(RemoteVerifierTest, MalformedRepliesGiveErrorVerdicts) {
  const v1::VerifyRequest request = Items({{"2", "2"}, {"3", "2"}});
  {
    v1::VerifyResponse one;
    one.add_results()->set_verdict(v1::CORRECT);
    Served served(std::make_unique<FakeService>(one));
    absl::StatusOr<std::unique_ptr<Verifier>> remote = Remote(served.server->address(), 5000);
    ASSERT_TRUE(remote.ok()) << remote.status();
    std::vector<v1::VerifyResult> results = (*remote)->VerifyBatch(request.items());
    ASSERT_EQ(results.size(), 2u);
    for (const v1::VerifyResult& r : results) {
      EXPECT_EQ(r.verdict(), v1::ERROR);
      EXPECT_EQ(r.reward(), -1.0f);
      EXPECT_THAT(r.detail(), HasSubstr("1 results for 2 items"));
    }
    absl::StatusOr<v1::VerifyResponse> client = served.Client()->Verify(request);
    EXPECT_EQ(client.status().code(), absl::StatusCode::kInternal);
  }
  {
    v1::VerifyResponse two;
    two.add_results()->set_verdict(v1::CORRECT);
    two.add_results()->set_verdict(v1::CORRECT);
    two.mutable_results(0)->set_reward(std::numeric_limits<float>::infinity());
    two.mutable_results(1)->set_reward(1);
    Served served(std::make_unique<FakeService>(two));
    absl::StatusOr<std::unique_ptr<Verifier>> remote = Remote(served.server->address(), 5000);
    ASSERT_TRUE(remote.ok()) << remote.status();
    std::vector<v1::VerifyResult> results = (*remote)->VerifyBatch(request.items());
    ASSERT_EQ(results.size(), 2u);
    EXPECT_EQ(results[0].verdict(), v1::ERROR);
    EXPECT_EQ(results[0].reward(), -1.0f);
    EXPECT_THAT(results[0].detail(), HasSubstr("results[0]: reward inf is not finite"));
    EXPECT_EQ(results[1].verdict(), v1::CORRECT);

    absl::StatusOr<v1::VerifyResponse> client = served.Client()->Verify(request);
    ASSERT_TRUE(client.ok()) << client.status();
    EXPECT_EQ(client->results(0).verdict(), v1::ERROR);
  }
}

TEST(RemoteVerifierTest, UnreachableServiceGivesErrorVerdictsOrRefusesToStart) {
  std::string address;
  {
    Served gone(std::make_unique<FakeService>(v1::VerifyResponse()));
    address = gone.server->address();
  }
  absl::StatusOr<std::unique_ptr<Verifier>> refused = Remote(address, 300, 200);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("verifier.address"));

  absl::StatusOr<std::unique_ptr<Verifier>> remote = Remote(address, 300, /*connect=*/0);
  ASSERT_TRUE(remote.ok()) << remote.status();
  const absl::Time start = absl::Now();
  std::vector<v1::VerifyResult> results = (*remote)->VerifyBatch(Items({{"2", "2"}}).items());
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(300) + absl::Seconds(1));
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].verdict(), v1::ERROR);
  EXPECT_EQ(results[0].reward(), -1.0f);
  EXPECT_THAT(results[0].detail(), HasSubstr(address + " is unavailable"));
  EXPECT_THAT(results[0].detail(), HasSubstr("no connection within 300 ms"));
  EXPECT_EQ(results[0].failure(), v1::VerifyResult::UNAVAILABLE);
}

// A live service that answers UNAVAILABLE itself is not a missing
// connection: the detail says it answered, and why.
TEST(RemoteVerifierTest, UnavailableFromALiveServiceIsToldApartFromNoConnection) {
  Served served(std::make_unique<FakeService>(v1::VerifyResponse(), false, /*unavailable=*/true));
  absl::StatusOr<std::unique_ptr<Verifier>> remote = Remote(served.server->address(), 5000);
  ASSERT_TRUE(remote.ok()) << remote.status();
  std::vector<v1::VerifyResult> results = (*remote)->VerifyBatch(Items({{"2", "2"}}).items());
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].verdict(), v1::ERROR);
  EXPECT_EQ(results[0].failure(), v1::VerifyResult::UNAVAILABLE);
  EXPECT_EQ(results[0].detail(), "the verifier at " + served.server->address() +
                                     " answered UNAVAILABLE (draining): connected, but the "
                                     "service refused");
}

TEST(RemoteVerifierTest, FactoryNamesTheBadField) {
  absl::StatusOr<std::unique_ptr<Verifier>> no_address = Remote("", 1000);
  EXPECT_EQ(no_address.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(no_address.status().message()), StartsWith("verifier.address"));
  absl::StatusOr<std::unique_ptr<Verifier>> no_deadline = Remote("127.0.0.1:1", 0, 0);
  EXPECT_EQ(no_deadline.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(no_deadline.status().message()), StartsWith("verifier.deadline_ms"));

  VerifierRegistry registry;
  ASSERT_TRUE(RegisterRemoteVerifier(registry).ok());
  EXPECT_EQ(RegisterRemoteVerifier(registry).code(), absl::StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace trellis::verifier
