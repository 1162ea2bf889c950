#include <sys/stat.h>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/auth.h"
#include "rpc/call_stats.h"
#include "rpc/channel.h"
#include "rpc/server.h"
#include "rpc/status.h"
#include "trellis/v1/services.grpc.pb.h"

namespace trellis::rpc {
namespace {

using ::testing::HasSubstr;

ServerOptions Advertising(const std::string& host) {
  ServerOptions options;
  options.advertise = host;
  return options;
}

TEST(StatusTest, CodesAndMessagesSurviveTheRoundTrip) {
  for (absl::StatusCode code :
       {absl::StatusCode::kInvalidArgument, absl::StatusCode::kFailedPrecondition,
        absl::StatusCode::kDeadlineExceeded, absl::StatusCode::kUnavailable,
        absl::StatusCode::kDataLoss}) {
    absl::Status in(code, "item 3: reward is NaN");
    absl::Status out = FromGrpc(ToGrpc(in), "verifier-0 Verify");
    EXPECT_EQ(out.code(), code);
    EXPECT_EQ(out.message(), "verifier-0 Verify: item 3: reward is NaN");
  }
  EXPECT_TRUE(FromGrpc(ToGrpc(absl::OkStatus())).ok());
}

// Answers after `delay`; fails items whose response is "bad".
class FakeVerifier final : public v1::Verifier::Service {
 public:
  explicit FakeVerifier(absl::Duration delay) : delay_(delay) {}
  grpc::Status Verify(grpc::ServerContext*, const v1::VerifyRequest* request,
                      v1::VerifyResponse* response) override {
    absl::SleepFor(delay_);
    for (const v1::VerifyItem& item : request->items()) {
      if (item.response() == "bad") {
        return ToGrpc(absl::InvalidArgumentError("items[0].response: bad"));
      }
      response->add_results()->set_reward(1);
    }
    return grpc::Status::OK;
  }

 private:
  absl::Duration delay_;
};

TEST(ServerTest, PortZeroReportsTheBoundPortAndCallsCarryErrors) {
  FakeVerifier service(absl::ZeroDuration());
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start("127.0.0.1:0", {&service});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_GT((*server)->port(), 0);
  EXPECT_EQ((*server)->address(), "127.0.0.1:" + std::to_string((*server)->port()));

  auto channel = NewChannel((*server)->address());
  ASSERT_TRUE(WaitConnected(*channel, (*server)->address(), absl::Seconds(5)).ok());
  auto stub = v1::Verifier::NewStub(channel);
  v1::VerifyRequest request;
  request.add_items()->set_response("fine");
  absl::StatusOr<v1::VerifyResponse> ok =
      Call(*stub, &v1::Verifier::Stub::Verify, request, absl::Seconds(5), "verifier-0 Verify");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->results_size(), 1);

  request.mutable_items(0)->set_response("bad");
  absl::StatusOr<v1::VerifyResponse> bad =
      Call(*stub, &v1::Verifier::Stub::Verify, request, absl::Seconds(5), "verifier-0 Verify");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("verifier-0 Verify: items[0].response"));
}

TEST(ServerTest, CallStatsCountAndTimeEveryCallByMethodAndCode) {
  FakeVerifier service(absl::ZeroDuration());
  CallStats stats;
  ServerOptions options;
  options.stats = &stats;
  absl::StatusOr<std::unique_ptr<Server>> server =
      Server::Start("127.0.0.1:0", {&service}, options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::Verifier::NewStub(NewChannel((*server)->address()));
  v1::VerifyRequest request;
  request.add_items()->set_response("fine");
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(Call(*stub, &v1::Verifier::Stub::Verify, request, absl::Seconds(5), "v").ok());
  }
  request.mutable_items(0)->set_response("bad");
  ASSERT_FALSE(Call(*stub, &v1::Verifier::Stub::Verify, request, absl::Seconds(5), "v").ok());
  (*server)->Shutdown();
  ledger::PrometheusText out;
  stats.WriteMetrics(out);
  EXPECT_THAT(out.text(), HasSubstr("trellis_rpc_calls_total{method=\"/trellis.v1.Verifier/"
                                    "Verify\",code=\"OK\"} 2\n"));
  EXPECT_THAT(out.text(), HasSubstr("trellis_rpc_calls_total{method=\"/trellis.v1.Verifier/"
                                    "Verify\",code=\"INVALID_ARGUMENT\"} 1\n"));
  EXPECT_THAT(out.text(),
              HasSubstr("trellis_rpc_seconds_count{method=\"/trellis.v1.Verifier/Verify\"} 3\n"));
}

TEST(ServerTest, EveryCallHasADeadline) {
  FakeVerifier service(absl::Seconds(1));
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start("127.0.0.1:0", {&service});
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::Verifier::NewStub(NewChannel((*server)->address()));
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::VerifyResponse> late = Call(*stub, &v1::Verifier::Stub::Verify,
                                                 v1::VerifyRequest(), absl::Milliseconds(300),
                                                 "slow");
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  (*server)->Shutdown(absl::ZeroDuration());
}

TEST(ServerTest, BadListenAddressIsAClearError) {
  FakeVerifier service(absl::ZeroDuration());
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start("localhost", {&service});
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(server.status().message(), HasSubstr("host:port"));
}

TEST(ServerTest, AdvertisesTheGivenHostWithTheBoundPort) {
  FakeVerifier service(absl::ZeroDuration());
  absl::StatusOr<std::unique_ptr<Server>> server =
      Server::Start("0.0.0.0:0", {&service}, Advertising("127.0.0.1"));
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->address(), absl::StrCat("127.0.0.1:", (*server)->port()));
  // The advertised address is the one that works.
  auto stub = v1::Verifier::NewStub(NewChannel((*server)->address()));
  absl::StatusOr<v1::VerifyResponse> reply = Call(*stub, &v1::Verifier::Stub::Verify,
                                                  v1::VerifyRequest(), absl::Seconds(5), "fake");
  EXPECT_TRUE(reply.ok()) << reply.status();
  (*server)->Shutdown(absl::ZeroDuration());
}

TEST(ServerTest, WildcardListenWithoutAdvertiseIsRefused) {
  FakeVerifier service(absl::ZeroDuration());
  for (const char* listen : {"0.0.0.0:0", "[::]:0", ":0"}) {
    absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(listen, {&service});
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << listen;
    EXPECT_THAT(server.status().message(), HasSubstr("host to advertise")) << listen;
  }
  absl::StatusOr<std::unique_ptr<Server>> with_port =
      Server::Start("0.0.0.0:0", {&service}, Advertising("node7:5000"));
  EXPECT_EQ(with_port.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(with_port.status().message(), HasSubstr("node7:5000"));
}

TEST(ChannelTest, SplitHostPortNamesABadAddress) {
  absl::StatusOr<HostPort> ok = SplitHostPort("10.0.0.7:4021");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->host, "10.0.0.7");
  EXPECT_EQ(ok->port, 4021);
  for (const char* bad : {"localhost", "host:", "host:http", "host:70000"}) {
    absl::StatusOr<HostPort> r = SplitHostPort(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(bad));
  }
}

TEST(ChannelTest, NobodyListeningIsUnavailableNamingTheAddress) {
  auto channel = NewChannel("127.0.0.1:1");
  absl::Status s = WaitConnected(*channel, "127.0.0.1:1", absl::Milliseconds(300));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("127.0.0.1:1"));
}

TEST(SecretTest, GeneratedParsedAndComparedWhole) {
  absl::StatusOr<JobSecret> a = JobSecret::Generate();
  absl::StatusOr<JobSecret> b = JobSecret::Generate();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->value().size(), 64u);
  EXPECT_NE(a->value(), b->value());
  EXPECT_TRUE(a->Accepts("Bearer " + a->value()));
  EXPECT_FALSE(a->Accepts("Bearer " + b->value()));
  EXPECT_FALSE(a->Accepts("Bearer " + a->value().substr(1)));
  EXPECT_FALSE(a->Accepts(""));
  EXPECT_TRUE(JobSecret::Insecure().Accepts(""));
  absl::StatusOr<JobSecret> parsed = JobSecret::Parse("  " + a->value() + "\n", "test");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->value(), a->value());
  for (const std::string bad : {std::string("short"), std::string(40, 'x') + " y"}) {
    absl::StatusOr<JobSecret> refused = JobSecret::Parse(bad, "FILE");
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(refused.status().message(), HasSubstr("FILE"));
    EXPECT_THAT(refused.status().message(), ::testing::Not(HasSubstr("short")));
  }
}

TEST(SecretTest, FilesAreWrittenPrivateAndOpenOnesRefused) {
  const std::string path = ::testing::TempDir() + "/rpc_test_secret";
  absl::StatusOr<JobSecret> secret = JobSecret::Generate();
  ASSERT_TRUE(secret.ok());
  ASSERT_TRUE(WriteSecretFile(path, *secret).ok());
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  absl::StatusOr<JobSecret> read = JobSecret::ReadFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->value(), secret->value());
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  absl::StatusOr<JobSecret> open = JobSecret::ReadFile(path);
  EXPECT_EQ(open.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(open.status().message(), HasSubstr("chmod 600"));
  EXPECT_EQ(JobSecret::ReadFile(path + ".missing").status().code(), absl::StatusCode::kNotFound);
}

// One unary call of `method` with an empty request through `channel`.
grpc::Status RawCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  SetDeadline(context, absl::Seconds(5));
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1), response;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  return status;
}

TEST(ServerTest, WithASecretOnlyCallsCarryingItReachTheService) {
  FakeVerifier service(absl::ZeroDuration());
  absl::StatusOr<JobSecret> secret = JobSecret::Generate();
  absl::StatusOr<JobSecret> other = JobSecret::Generate();
  ASSERT_TRUE(secret.ok() && other.ok());
  ServerOptions options;
  options.secret = *secret;
  absl::StatusOr<std::unique_ptr<Server>> server =
      Server::Start("127.0.0.1:0", {&service}, options);
  ASSERT_TRUE(server.ok()) << server.status();
  (*server)->SetServing(true);
  const std::string address = (*server)->address();
  v1::VerifyRequest request;
  request.add_items()->set_response("fine");
  for (const JobSecret& wrong : {JobSecret::Insecure(), *other}) {
    auto stub = v1::Verifier::NewStub(NewChannel(address, kDefaultStallLimit, wrong));
    absl::StatusOr<v1::VerifyResponse> refused =
        Call(*stub, &v1::Verifier::Stub::Verify, request, absl::Seconds(5), "v");
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_THAT(refused.status().message(), HasSubstr("credentials"));
    // Reflection would list the services: it is closed too.
    EXPECT_EQ(RawCall(NewChannel(address, kDefaultStallLimit, wrong),
                      "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo")
                  .error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    // Health stays open for readiness probes.
    EXPECT_TRUE(
        RawCall(NewChannel(address, kDefaultStallLimit, wrong), "/grpc.health.v1.Health/Check")
            .ok());
  }
  auto stub = v1::Verifier::NewStub(NewChannel(address, kDefaultStallLimit, *secret));
  absl::StatusOr<v1::VerifyResponse> served =
      Call(*stub, &v1::Verifier::Stub::Verify, request, absl::Seconds(5), "v");
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_EQ(served->results_size(), 1);
  (*server)->Shutdown(absl::ZeroDuration());
}

}  // namespace
}  // namespace trellis::rpc
