// A guess-the-number environment written in Python as a gRPC server
// (environment_service/python/guess_server.py), run as its own process and
// played from C++ through NewRemoteEnvironment.

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "environment_service/environment_service.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "plugin/process.h"

namespace trellis::environment {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
// The child-process helper the verifier's and environments' plugins use.
namespace proc = plugin;
using proc::Child;

// The server process and the address it reported.
struct PythonServer {
  std::unique_ptr<Child> child;
  std::string address;
};

PythonServer Start(std::vector<std::string> flags = {}) {
  EXPECT_NE(std::getenv("TRELLIS_PYTHON_STUBS"), nullptr) << "run through ctest";
  proc::SpawnOptions options;
  options.argv = {TRELLIS_PYTHON3,
                  TRELLIS_SOURCE_DIR "/environment_service/python/guess_server.py"};
  options.argv.insert(options.argv.end(), flags.begin(), flags.end());
  absl::StatusOr<std::unique_ptr<Child>> child = Child::Spawn(options);
  EXPECT_TRUE(child.ok()) << child.status();
  if (!child.ok()) return {};
  // "guess_server: serving on HOST:PORT"
  absl::StatusOr<std::string> line = (*child)->ReadLine(absl::Now() + absl::Seconds(30), 4096);
  EXPECT_TRUE(line.ok()) << line.status();
  if (!line.ok()) return {};
  EXPECT_THAT(*line, StartsWith("guess_server: serving on "));
  const size_t on = line->rfind(" on ");
  return {*std::move(child), on == std::string::npos ? "" : line->substr(on + 4)};
}

// The server started with `flags` and a remote environment reaching it
// (nullptr when either failed).
struct Connected {
  PythonServer py;
  std::unique_ptr<Environment> remote;
};

Connected Connect(std::vector<std::string> flags = {}) {
  Connected connected{Start(std::move(flags)), nullptr};
  if (connected.py.address.empty()) return connected;
  v1::EnvironmentConfig config;
  config.set_name("remote");
  config.set_address(connected.py.address);
  config.set_call_deadline_ms(10000);
  absl::StatusOr<std::unique_ptr<Environment>> remote = NewRemoteEnvironment(config);
  EXPECT_TRUE(remote.ok()) << remote.status();
  if (remote.ok()) connected.remote = *std::move(remote);
  return connected;
}

// What a binary-search policy got from one episode.
struct Played {
  int turns = 0;
  float reward = 0;
  int guess = 0;
  bool done = false;
};

// Plays episode `id` to done (at most 10 turns), halving [1, 100] on each
// "higher" or "lower".
Played Play(Environment& env, const std::string& id, const std::string& answer, uint64_t seed) {
  v1::OpenEpisodeRequest open;
  open.set_episode_id(id);
  open.set_prompt("I am thinking of a number.");
  open.set_answer(answer);
  open.set_seed(seed);
  absl::StatusOr<v1::OpenEpisodeResponse> opened = env.Open(open);
  EXPECT_TRUE(opened.ok()) << opened.status();
  if (opened.ok()) EXPECT_EQ(opened->observation(), " Guess a number between 1 and 100.");
  Played played;
  int low = 1, high = 100;
  while (!played.done && played.turns < 10) {
    played.guess = (low + high) / 2;
    v1::EnvironmentStepRequest step;
    step.set_episode_id(id);
    step.set_action(absl::StrCat(played.guess, "="));
    step.set_turn(played.turns++);
    absl::StatusOr<v1::EnvironmentStepResponse> answered = env.Step(step);
    EXPECT_TRUE(answered.ok()) << answered.status();
    if (!answered.ok()) break;
    EXPECT_EQ(answered->metadata_json(), absl::StrCat("{\"turn\": ", step.turn(), "}"));
    played.reward += answered->reward();
    played.done = answered->done();
    if (answered->observation() == " higher") low = played.guess + 1;
    if (answered->observation() == " lower") high = played.guess - 1;
  }
  v1::CloseEpisodeRequest close;
  close.set_episode_id(id);
  EXPECT_TRUE(env.Close(close).ok());
  return played;
}

TEST(PythonEnvironmentTest, BinarySearchFindsTheAnswer) {
  Connected c = Connect();
  ASSERT_NE(c.remote, nullptr);
  Environment& remote = *c.remote;
  const Played played = Play(remote, "0-1-0-0", "37", 0);
  EXPECT_TRUE(played.done);
  EXPECT_EQ(played.guess, 37);
  EXPECT_EQ(played.reward, 1.0f);
  // 50, 25, 37.
  EXPECT_EQ(played.turns, 3);
}

TEST(PythonEnvironmentTest, EqualSeedsGiveEqualEpisodes) {
  Connected c = Connect();
  ASSERT_NE(c.remote, nullptr);
  Environment& remote = *c.remote;
  const Played a = Play(remote, "a", "", 1234);
  const Played b = Play(remote, "b", "", 1234);
  EXPECT_TRUE(a.done);
  EXPECT_EQ(a.reward, 1.0f);
  EXPECT_EQ(a.guess, b.guess);
  EXPECT_EQ(a.turns, b.turns);
}

TEST(PythonEnvironmentTest, UnknownEpisodeIsInternalNamingTheServersCode) {
  Connected c = Connect();
  ASSERT_NE(c.remote, nullptr);
  Environment& remote = *c.remote;
  v1::EnvironmentStepRequest step;
  step.set_episode_id("never-opened");
  step.set_action("5=");
  absl::StatusOr<v1::EnvironmentStepResponse> answered = remote.Step(step);
  EXPECT_EQ(answered.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(answered.status().message()),
              HasSubstr("no open episode 'never-opened' (NOT_FOUND)"));
}

TEST(PythonEnvironmentTest, NanRewardIsMalformed) {
  Connected c = Connect({"--nan"});
  ASSERT_NE(c.remote, nullptr);
  Environment& remote = *c.remote;
  v1::OpenEpisodeRequest open;
  open.set_episode_id("e");
  ASSERT_TRUE(remote.Open(open).ok());
  v1::EnvironmentStepRequest step;
  step.set_episode_id("e");
  step.set_action("50=");
  absl::StatusOr<v1::EnvironmentStepResponse> answered = remote.Step(step);
  EXPECT_EQ(answered.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(answered.status().message()), HasSubstr("malformed reply: reward nan"));
}

}  // namespace
}  // namespace trellis::environment
