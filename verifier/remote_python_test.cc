// Python verifiers written with the SDK (verifier/python/trellis_verifier),
// each run as its own process, scored through the C++ "remote" verifier; and
// tests/python/check_services.py (protoc stubs only) against the C++ service.

#include <cstdlib>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "plugin/process.h"
#include "roles/local_roles.h"
#include "rpc/server.h"
#include "tools/verify_command.h"
#include "verifier/verifier_service.h"

namespace trellis::verifier {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// A Python verifier process and the address it reported.
struct PythonVerifier {
  std::unique_ptr<plugin::Child> child;
  std::string address;
};

PythonVerifier Start(const std::vector<std::string>& args) {
  EXPECT_NE(std::getenv("TRELLIS_PYTHON_STUBS"), nullptr) << "run through ctest";
  plugin::SpawnOptions options;
  options.argv = {TRELLIS_PYTHON3};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  absl::StatusOr<std::unique_ptr<plugin::Child>> child = plugin::Child::Spawn(options);
  EXPECT_TRUE(child.ok()) << child.status();
  if (!child.ok()) return {};
  // "trellis_verifier: serving NAME@VERSION on HOST:PORT"
  absl::StatusOr<std::string> line = (*child)->ReadLine(absl::Now() + absl::Seconds(30), 4096);
  EXPECT_TRUE(line.ok()) << line.status();
  if (!line.ok()) return {};
  EXPECT_THAT(*line, StartsWith("trellis_verifier: serving "));
  const size_t on = line->rfind(" on ");
  return {*std::move(child), on == std::string::npos ? "" : line->substr(on + 4)};
}

std::unique_ptr<Verifier> Remote(const std::string& address, int deadline_ms) {
  VerifierRegistry registry;
  EXPECT_TRUE(RegisterRemoteVerifier(registry).ok());
  v1::VerifierConfig config;
  config.set_name("remote");
  config.set_address(address);
  config.set_deadline_ms(deadline_ms);
  config.set_timeout_reward(-0.25f);
  absl::StatusOr<std::unique_ptr<Verifier>> v = registry.Create(config);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *std::move(v) : nullptr;
}

google::protobuf::RepeatedPtrField<v1::VerifyItem> Items(
    std::initializer_list<std::pair<const char*, const char*>> pairs) {
  google::protobuf::RepeatedPtrField<v1::VerifyItem> items;
  for (const auto& [response, answer] : pairs) {
    v1::VerifyItem* item = items.Add();
    item->set_prompt("12+30=");
    item->set_response(response);
    item->set_answer(answer);
  }
  return items;
}

TEST(RemotePythonTest, NumericExampleAgreesWithTheBuiltin) {
  PythonVerifier py = Start({TRELLIS_SOURCE_DIR "/examples/verifiers/python_numeric.py"});
  ASSERT_FALSE(py.address.empty());
  std::unique_ptr<Verifier> remote = Remote(py.address, 10000);
  ASSERT_NE(remote, nullptr);

  VerifierRegistry registry;
  ASSERT_TRUE(RegisterBuiltinVerifiers(registry).ok());
  v1::VerifierConfig numeric;
  numeric.set_name("numeric");
  std::unique_ptr<Verifier> builtin = *registry.Create(numeric);

  const auto items = Items({{"42", "42"}, {"42<eos>", "42"}, {" 41", "42"}, {"x", "42"},
                            {"-7", "-7"}, {"", "3"}, {"1.5 apples", "1.5"}, {"5", "five"},
                            {"007", "7"}, {"12+30=42", "42"}, {"7", "inf"}, {"--5", "-5"}});
  const std::vector<v1::VerifyResult> got = remote->VerifyBatch(items);
  const std::vector<v1::VerifyResult> want = builtin->VerifyBatch(items);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].verdict(), want[i].verdict()) << i << ": " << got[i].detail();
    EXPECT_EQ(got[i].reward(), want[i].reward()) << i;
    EXPECT_EQ(got[i].verifier(), "numeric-py@1");
  }
}

TEST(RemotePythonTest, VerifyCommandScoresThroughRemote) {
  PythonVerifier py = Start({TRELLIS_SOURCE_DIR "/examples/verifiers/python_numeric.py"});
  ASSERT_FALSE(py.address.empty());
  roles::AddVerifierKinds(RegisterRemoteVerifier);
  std::ostringstream out, err;
  EXPECT_EQ(tools::VerifyCommand({"--verifier", "remote", "--config", "address=" + py.address,
                           "--items", TRELLIS_SOURCE_DIR "/examples/verifiers/samples.jsonl"},
                          out, err),
            0)
      << err.str();
  EXPECT_THAT(out.str(), HasSubstr("CORRECT\t1"));
  EXPECT_THAT(out.str(), HasSubstr("WRONG\t1"));
}

TEST(RemotePythonTest, ScoreThatRaisesOrReturnsNanGivesErrorWithReason) {
  for (const char* mode : {"raise", "nan"}) {
    PythonVerifier py =
        Start({TRELLIS_SOURCE_DIR "/verifier/python/testdata/faulty_verifier.py", mode});
    ASSERT_FALSE(py.address.empty()) << mode;
    std::unique_ptr<Verifier> remote = Remote(py.address, 10000);
    ASSERT_NE(remote, nullptr);
    const std::vector<v1::VerifyResult> got = remote->VerifyBatch(Items({{"ok", ""}, {"bad", ""}}));
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].verdict(), v1::CORRECT) << mode;
    EXPECT_EQ(got[1].verdict(), v1::ERROR) << mode;
    EXPECT_THAT(got[1].detail(), HasSubstr(std::string(mode) == "raise"
                                               ? "score raised ValueError: cannot score 'bad'"
                                               : "non-finite reward nan"));
  }
}

TEST(RemotePythonTest, SlowScoreTimesOutWithinDeadlineAndTheServiceRecovers) {
  PythonVerifier py = Start({TRELLIS_SOURCE_DIR "/verifier/python/testdata/faulty_verifier.py",
                             "slow", "--workers", "2"});
  ASSERT_FALSE(py.address.empty());
  std::unique_ptr<Verifier> remote = Remote(py.address, 500);
  ASSERT_NE(remote, nullptr);
  const absl::Time start = absl::Now();
  const std::vector<v1::VerifyResult> got = remote->VerifyBatch(Items({{"ok", ""}, {"slow", ""}}));
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500) + absl::Seconds(1));
  ASSERT_EQ(got.size(), 2u);
  for (const v1::VerifyResult& r : got) {
    EXPECT_EQ(r.verdict(), v1::TIMEOUT);
    EXPECT_EQ(r.reward(), -0.25f);
    EXPECT_THAT(r.detail(), StartsWith("timeout: "));
  }
  // The next batch is served by another worker thread.
  const std::vector<v1::VerifyResult> next = remote->VerifyBatch(Items({{"ok", ""}}));
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].verdict(), v1::CORRECT) << next[0].detail();
}

TEST(RemotePythonTest, CheckServicesScriptCallsHealthAndVerifyOnTheCppService) {
  VerifierRegistry registry;
  ASSERT_TRUE(RegisterBuiltinVerifiers(registry).ok());
  v1::VerifierConfig numeric;
  numeric.set_name("numeric");
  std::unique_ptr<v1::Verifier::Service> service =
      NewVerifierService(std::shared_ptr<const Verifier>(*registry.Create(numeric)), "numeric");
  absl::StatusOr<std::unique_ptr<rpc::Server>> server =
      rpc::Server::Start("127.0.0.1:0", {service.get()});
  ASSERT_TRUE(server.ok()) << server.status();
  (*server)->SetServing(true);

  plugin::SpawnOptions options;
  options.argv = {TRELLIS_PYTHON3, TRELLIS_SOURCE_DIR "/tests/python/check_services.py",
                  (*server)->address(),
                  "--probe", R"({"prompt": "2+3=", "response": "5", "answer": "5"})",
                  "--probe", R"({"prompt": "2+3=", "response": "?", "answer": "5"})",
                  "--expect", "correct", "--expect", "unparseable"};
  options.capture_stderr = true;
  absl::StatusOr<std::unique_ptr<plugin::Child>> child = plugin::Child::Spawn(options);
  ASSERT_TRUE(child.ok()) << child.status();
  std::string out, err;
  ASSERT_TRUE(
      (*child)->Communicate("", absl::Now() + absl::Seconds(60), 1 << 20, &out, &err).ok());
  absl::StatusOr<int> status = (*child)->Wait(absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(plugin::Child::DescribeExit(*status), "exit status 0") << out << err;
  // Reflection lists the services of a C++ server.
  EXPECT_THAT(out, HasSubstr("grpc.health.v1.Health"));
  EXPECT_THAT(out, HasSubstr("trellis.v1.Verifier"));
  EXPECT_THAT(out, HasSubstr("Verify: 2 items -> CORRECT, UNPARSEABLE"));
}

}  // namespace
}  // namespace trellis::verifier
