// `trellis serve environment` (launch/environment_server.h) as its own
// process: the job's guess_number environment served over gRPC with the
// job's secret, played to the end (Open, Step, Close) through the "remote"
// environment a launched job uses; a call without the secret is refused;
// SIGTERM stops it cleanly. Bad input (no --listen, no --job, an unknown
// environment) exits with the invalid-input code, saying what is wrong.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "config/job_config.h"
#include "environment_service/environment_service.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launch/launcher.h"
#include "rpc/auth.h"
#include "tests/tiny_job.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

fs::path FreshRoot(const std::string& name) {
  const fs::path root = fs::path(::testing::TempDir()) / (name + "_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  return root;
}

// A job whose environment is guess_number over [1, 100].
fs::path WriteGuessJob(const fs::path& root, const std::string& name) {
  v1::JobConfig job = testing_util::TinyJob();
  job.mutable_environment()->set_name(name);
  job.mutable_environment()->set_turn_stop("=");
  const fs::path path = root / (name + ".yaml");
  testing_util::WriteText(path, config::ResolvedJobYaml(job));
  return path;
}

// Runs `trellis serve environment ARGS...` to its end; its exit code and output.
std::pair<int, std::string> ServeToEnd(const fs::path& root, const std::vector<std::string>& args) {
  std::vector<std::string> all = {"serve", "environment"};
  all.insert(all.end(), args.begin(), args.end());
  const int status = testing_util::Wait(testing_util::StartTrellis(all, root / "bad.log"));
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, testing_util::Slurp(root / "bad.log")};
}

TEST(ServeEnvironmentTest, ARemoteEnvironmentPlaysAnEpisodeOnTheServedOne) {
  const fs::path root = FreshRoot("serve_environment_test");
  const fs::path job = WriteGuessJob(root, "guess_number");
  absl::StatusOr<rpc::JobSecret> secret = rpc::JobSecret::Generate();
  ASSERT_TRUE(secret.ok()) << secret.status();
  ASSERT_TRUE(rpc::WriteSecretFile((root / "secret").string(), *secret).ok());
  const fs::path address_file = root / "address";
  const pid_t pid = testing_util::StartTrellis(
      {"serve", "environment", "--job", job.string(), "--listen", "127.0.0.1:0", "--address-file",
       address_file.string(), "--secret-file", (root / "secret").string()},
      root / "serve.log");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!fs::exists(address_file) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(fs::exists(address_file)) << testing_util::Slurp(root / "serve.log");
  v1::EnvironmentConfig config;
  config.set_name("remote");
  config.set_address(testing_util::Slurp(address_file));
  config.set_call_deadline_ms(30000);
  config.set_workers(1);

  v1::OpenEpisodeRequest open;
  open.set_episode_id("7-0-0-0");
  open.set_seed(11);
  {  // Without the job's secret, the call is refused.
    absl::StatusOr<std::unique_ptr<environment::Environment>> stranger =
        environment::NewRemoteEnvironment(config);
    ASSERT_TRUE(stranger.ok()) << stranger.status();
    absl::StatusOr<v1::OpenEpisodeResponse> refused = (*stranger)->Open(open);
    ASSERT_FALSE(refused.ok());
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr("UNAUTHENTICATED"));
  }
  rpc::SetProcessSecret(*secret);
  absl::StatusOr<std::unique_ptr<environment::Environment>> remote =
      environment::NewRemoteEnvironment(config);
  ASSERT_TRUE(remote.ok()) << remote.status();
  absl::StatusOr<v1::OpenEpisodeResponse> opened = (*remote)->Open(open);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(opened->observation(), "1-100?");
  // Binary search: guess_number answers ">" (higher), "<" (lower) or "=".
  int low = 1, high = 100, turn = 0;
  bool done = false;
  double reward = 0;
  for (; turn < 8 && !done; ++turn) {
    const int guess = (low + high) / 2;
    v1::EnvironmentStepRequest step;
    step.set_episode_id(open.episode_id());
    step.set_turn(turn);
    step.set_action(std::to_string(guess) + "=");
    absl::StatusOr<v1::EnvironmentStepResponse> answer = (*remote)->Step(step);
    ASSERT_TRUE(answer.ok()) << answer.status();
    done = answer->done();
    reward += answer->reward();
    if (answer->observation() == ">") low = guess + 1;
    if (answer->observation() == "<") high = guess - 1;
  }
  EXPECT_TRUE(done) << "not found in 8 guesses";
  EXPECT_EQ(reward, 1);
  v1::CloseEpisodeRequest close;
  close.set_episode_id(open.episode_id());
  EXPECT_TRUE((*remote)->Close(close).ok());
  rpc::SetProcessSecret(rpc::JobSecret::Insecure());

  ::kill(pid, SIGTERM);
  const int status = testing_util::Wait(pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << testing_util::Slurp(root / "serve.log");
  EXPECT_THAT(testing_util::Slurp(root / "serve.log"), HasSubstr("serving \"guess_number\""));
}

TEST(ServeEnvironmentTest, BadInputIsRefusedSayingWhat) {
  const fs::path root = FreshRoot("serve_environment_bad_test");
  const fs::path job = WriteGuessJob(root, "guess_number");
  auto [code, log] = ServeToEnd(root, {"--job", job.string(), "--insecure"});
  EXPECT_EQ(code, launch::kExitInvalidInput);
  EXPECT_THAT(log, HasSubstr("--listen HOST:PORT is required"));

  std::tie(code, log) = ServeToEnd(root, {"--listen", "127.0.0.1:0", "--insecure"});
  EXPECT_EQ(code, launch::kExitInvalidInput);
  EXPECT_THAT(log, HasSubstr("--job JOB.yaml is required"));

  const fs::path unknown = WriteGuessJob(root, "no_such_environment");
  std::tie(code, log) =
      ServeToEnd(root, {"--job", unknown.string(), "--listen", "127.0.0.1:0", "--insecure"});
  EXPECT_EQ(code, launch::kExitInvalidInput);
  EXPECT_THAT(log, HasSubstr("environment.name"));
  EXPECT_THAT(log, HasSubstr("no_such_environment"));
}

}  // namespace
}  // namespace trellis
