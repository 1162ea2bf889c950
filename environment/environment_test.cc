// The registry and the built-ins through it (so through the pool):
// guess_number, python_tool (in the sandbox) and subprocess plugins that
// hang, crash or answer garbage.

#include "environment/environment.h"

#include <memory>
#include <string>
#include <vector>

#include "environment/builtin.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "plugin/sandbox.h"

namespace trellis::environment {
namespace {

using ::testing::HasSubstr;

class EnvironmentTest : public ::testing::Test {
 protected:
  EnvironmentTest() { EXPECT_TRUE(RegisterBuiltinEnvironments(registry_).ok()); }

  std::unique_ptr<Environment> Create(const v1::EnvironmentConfig& config) {
    absl::StatusOr<std::unique_ptr<Environment>> env = registry_.Create(config);
    EXPECT_TRUE(env.ok()) << env.status();
    return env.ok() ? *std::move(env) : nullptr;
  }

  static absl::StatusOr<v1::OpenEpisodeResponse> Open(Environment& env, const std::string& id,
                                                      uint64_t seed = 1,
                                                      const std::string& answer = "") {
    v1::OpenEpisodeRequest r;
    r.set_episode_id(id);
    r.set_seed(seed);
    r.set_answer(answer);
    return env.Open(r);
  }

  static absl::StatusOr<v1::EnvironmentStepResponse> Step(Environment& env, const std::string& id,
                                                          const std::string& action) {
    v1::EnvironmentStepRequest r;
    r.set_episode_id(id);
    r.set_action(action);
    return env.Step(r);
  }

  EnvironmentRegistry registry_;
};

v1::EnvironmentConfig Config(const std::string& name, const std::string& options = "") {
  v1::EnvironmentConfig c;
  c.set_name(name);
  c.set_options_json(options);
  return c;
}

TEST_F(EnvironmentTest, RegistryNamesWhatIsRegisteredAndRefusesDuplicates) {
  absl::StatusOr<std::unique_ptr<Environment>> unknown = registry_.Create(Config("chess"));
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.status().message(),
              HasSubstr("unknown environment \"chess\"; registered environments: guess_number, "
                        "python_tool, subprocess"));
  EXPECT_EQ(registry_
                .Register("guess_number",
                          [](const v1::EnvironmentConfig&) {
                            return absl::StatusOr<std::unique_ptr<Environment>>(nullptr);
                          })
                .code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry_.Register("", nullptr).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(registry_
                  .Register("null",
                            [](const v1::EnvironmentConfig&) {
                              return absl::StatusOr<std::unique_ptr<Environment>>(nullptr);
                            })
                  .ok());
  EXPECT_EQ(registry_.Create(Config("null")).status().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(registry_.Contains("subprocess"));
  EXPECT_FALSE(registry_.Contains("chess"));
}

TEST_F(EnvironmentTest, RegistryRefusesBadPoolSettings) {
  v1::EnvironmentConfig c = Config("guess_number");
  c.set_call_deadline_ms(0);
  EXPECT_THAT(registry_.Create(c).status().message(),
              HasSubstr("environment.call_deadline_ms: must be >= 1, found 0"));
  c = Config("guess_number");
  c.set_workers(0);
  EXPECT_THAT(registry_.Create(c).status().message(), HasSubstr("environment.workers"));
}

TEST_F(EnvironmentTest, GuessNumberRefusesBadOptionsNamingThem) {
  for (const auto& [options, expected] : std::vector<std::pair<std::string, std::string>>{
           {"[1]", "guess_number expects a JSON object, found array"},
           {"{", "text that is not JSON"},
           {R"({"lo": 1})", "guess_number has no option \"lo\""},
           {R"({"low": "1"})", "environment.options_json.low: expected an integer"},
           {R"({"low": 5, "high": 4})", "low <= high"}}) {
    absl::StatusOr<std::unique_ptr<Environment>> env =
        registry_.Create(Config("guess_number", options));
    EXPECT_EQ(env.status().code(), absl::StatusCode::kInvalidArgument) << options;
    EXPECT_THAT(env.status().message(), HasSubstr(expected));
  }
}

TEST_F(EnvironmentTest, GuessNumberAnswersTheLastIntegerOfEachAction) {
  std::unique_ptr<Environment> env =
      Create(Config("guess_number", R"({"low": 7, "high": 7, "open": "[{low},{high}]"})"));
  ASSERT_NE(env, nullptr);
  absl::StatusOr<v1::OpenEpisodeResponse> opened = Open(*env, "e");
  ASSERT_TRUE(opened.ok());
  EXPECT_EQ(opened->observation(), "[7,7]");
  EXPECT_EQ(Step(*env, "e", "no number")->observation(), "?");
  EXPECT_EQ(Step(*env, "e", "7 or 3")->observation(), ">");
  EXPECT_EQ(Step(*env, "e", "3 or 9")->observation(), "<");
  absl::StatusOr<v1::EnvironmentStepResponse> found = Step(*env, "e", "it is 7.");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->observation(), "=");
  EXPECT_EQ(found->reward(), 1);
  EXPECT_TRUE(found->done());
  EXPECT_EQ(Step(*env, "e", "7").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Open(*env, "e").status().code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(EnvironmentTest, GuessNumberDrawsTheSecretFromTheSeed) {
  std::unique_ptr<Environment> env = Create(Config("guess_number", R"({"low": 0, "high": 1})"));
  ASSERT_NE(env, nullptr);
  // With two values, some seed gives each; equal seeds give equal secrets.
  std::vector<std::string> first;
  for (uint64_t seed = 0; seed < 16; ++seed) {
    const std::string id = "s" + std::to_string(seed);
    ASSERT_TRUE(Open(*env, id, seed).ok());
    first.push_back(Step(*env, id, "0")->observation());
    ASSERT_TRUE(Open(*env, id + "again", seed).ok());
    EXPECT_EQ(Step(*env, id + "again", "0")->observation(), first.back());
  }
  EXPECT_THAT(first, ::testing::Contains("="));
  EXPECT_THAT(first, ::testing::Contains(">"));
}

// python_tool in bubblewrap, or in the rlimits fallback where bubblewrap
// does not work.
v1::EnvironmentConfig PythonConfig() {
  v1::EnvironmentConfig c =
      Config("python_tool", plugin::BwrapWorks() ? R"({"sandbox": "bwrap", "max_output": 32})"
                                                 : R"({"sandbox": "rlimits", "max_output": 32})");
  c.set_call_deadline_ms(3000);
  return c;
}

TEST_F(EnvironmentTest, PythonToolRunsTheCodeAfterTheLastMarker) {
  std::unique_ptr<Environment> env = Create(PythonConfig());
  ASSERT_NE(env, nullptr);
  absl::StatusOr<v1::OpenEpisodeResponse> opened = Open(*env, "p", 1, "42");
  ASSERT_TRUE(opened.ok()) << opened.status();
  ASSERT_EQ(opened->tools_size(), 1);
  EXPECT_EQ(opened->tools(0).name(), "python");
  absl::StatusOr<v1::EnvironmentStepResponse> ran =
      Step(*env, "p", "<py>print(1)</py> then <py>print(6*7)</py>");
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_EQ(ran->observation(), "42\n");
  EXPECT_FALSE(ran->done());
  EXPECT_EQ(Step(*env, "p", "<py>print('x' * 100)")->observation(), std::string(32, 'x'))
      << "cut to max_output; no closing marker runs to the end";
  EXPECT_THAT(Step(*env, "p", "<py>1/0</py>")->observation(), HasSubstr("ZeroDivisionError"));
  absl::StatusOr<v1::EnvironmentStepResponse> wrong = Step(*env, "p", "It is 41.");
  ASSERT_TRUE(wrong.ok());
  EXPECT_EQ(wrong->reward(), 0);
  EXPECT_TRUE(wrong->done());
  EXPECT_THAT(wrong->metadata_json(), HasSubstr("WRONG"));

  ASSERT_TRUE(Open(*env, "q", 1, "42").ok());
  absl::StatusOr<v1::EnvironmentStepResponse> right = Step(*env, "q", "It is \\boxed{42}");
  ASSERT_TRUE(right.ok());
  EXPECT_EQ(right->reward(), 1);
  EXPECT_TRUE(right->done());
}

TEST_F(EnvironmentTest, PythonToolRefusesBadOptions) {
  EXPECT_THAT(
      registry_.Create(Config("python_tool", R"({"sandbox": "docker"})")).status().message(),
      HasSubstr("expected auto, bwrap or rlimits"));
  EXPECT_THAT(
      registry_.Create(Config("python_tool", R"({"sandbox": "rlimits", "answer_verifier": "x"})"))
          .status()
          .message(),
      HasSubstr("answer_verifier: verifier.name: unknown verifier \"x\""));
}

TEST_F(EnvironmentTest, PythonToolCodePastTheDeadlineCostsTheDeadline) {
  v1::EnvironmentConfig c = PythonConfig();
  c.set_call_deadline_ms(1500);
  std::unique_ptr<Environment> env = Create(c);
  ASSERT_NE(env, nullptr);
  ASSERT_TRUE(Open(*env, "p").ok());
  EXPECT_EQ(FailureReason(Step(*env, "p", "<py>while True: pass</py>").status()), "deadline");
}

// A subprocess plugin: a Python program on the command line.
v1::EnvironmentConfig Plugin(const std::string& program, int deadline_ms = 1500) {
  v1::EnvironmentConfig c = Config("subprocess");
  c.add_command(TRELLIS_PYTHON3);
  c.add_command("-c");
  c.add_command(
      "import json, sys, time, os\n"
      "for line in sys.stdin:\n"
      "    r = json.loads(line)\n"
      "    a = r.get('action', '')\n" +
      program +
      "    lines = out if isinstance(out, list) else [out]\n"
      "    sys.stdout.write(''.join(json.dumps(o) + '\\n' for o in lines))\n"
      "    sys.stdout.flush()\n");
  c.set_workers(1);
  c.set_call_deadline_ms(deadline_ms);
  c.set_breaker_failures(0);
  return c;
}

// Answers by the action: "hang" sleeps, "crash" exits, "garbage" writes
// text, "nan" a NaN reward, "twice" two lines, "error" an error answer.
const char kFaulty[] =
    "    out = {'id': r['id'], 'reward': 0.5, 'done': False, 'observation': a}\n"
    "    if a == 'hang': time.sleep(60)\n"
    "    if a == 'crash': os._exit(3)\n"
    "    if a == 'garbage': out = 'not an object'\n"
    "    if a == 'nan': out['reward'] = float('nan')\n"
    "    if a == 'twice': out = [out, out]\n"
    "    if a == 'error': out = {'id': r['id'], 'error': 'no such move'}\n"
    "    if a == 'noreward': del out['reward']\n";

TEST_F(EnvironmentTest, SubprocessFaultsCostAtMostTheDeadlineAndSayTheirReason) {
  std::unique_ptr<Environment> env = Create(Plugin(kFaulty));
  ASSERT_NE(env, nullptr);
  ASSERT_TRUE(Open(*env, "a").ok());
  absl::StatusOr<v1::EnvironmentStepResponse> echo = Step(*env, "a", "hello");
  ASSERT_TRUE(echo.ok()) << echo.status();
  EXPECT_EQ(echo->observation(), "hello");
  EXPECT_EQ(echo->reward(), 0.5f);

  EXPECT_EQ(FailureReason(Step(*env, "a", "nan").status()), "malformed");
  EXPECT_EQ(FailureReason(Step(*env, "a", "noreward").status()), "malformed");
  absl::StatusOr<v1::EnvironmentStepResponse> error = Step(*env, "a", "error");
  EXPECT_EQ(error.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(FailureReason(error.status()), "call_failed");
  EXPECT_THAT(error.status().message(), HasSubstr("plugin error: no such move"));
  EXPECT_TRUE(Step(*env, "a", "still here").ok()) << "an error answer keeps the process";

  EXPECT_EQ(FailureReason(Step(*env, "a", "hang").status()), "deadline");
  // Its worker was killed: the episode is lost; a new one gets a new process.
  absl::StatusOr<v1::EnvironmentStepResponse> lost = Step(*env, "a", "hello");
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(FailureReason(lost.status()), "call_failed");
  EXPECT_THAT(lost.status().message(), HasSubstr("was lost"));
  ASSERT_TRUE(Open(*env, "b").ok());
  EXPECT_TRUE(Step(*env, "b", "hello").ok());

  absl::StatusOr<v1::EnvironmentStepResponse> crashed = Step(*env, "b", "crash");
  EXPECT_EQ(FailureReason(crashed.status()), "call_failed");
  EXPECT_THAT(crashed.status().message(), HasSubstr("died (exit status 3)"));
  ASSERT_TRUE(Open(*env, "c").ok());
  EXPECT_EQ(FailureReason(Step(*env, "c", "garbage").status()), "malformed");
  EXPECT_EQ(FailureReason(Step(*env, "c", "twice").status()), "malformed");
  ASSERT_TRUE(Open(*env, "d").ok());
  EXPECT_TRUE(Step(*env, "d", "hello").ok());
  v1::CloseEpisodeRequest close;
  close.set_episode_id("a");
  EXPECT_TRUE(env->Close(close).ok()) << "closing a lost episode";
}

TEST_F(EnvironmentTest, SubprocessThatCannotStartIsUnavailable) {
  v1::EnvironmentConfig c = Config("subprocess");
  c.add_command("/nonexistent/plugin");
  c.add_command("--flag");
  std::unique_ptr<Environment> env = Create(c);
  ASSERT_NE(env, nullptr);
  EXPECT_EQ(Open(*env, "a").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(registry_.Create(Config("subprocess")).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// One classification of failed calls for every counter (the pool's, the
// loop's episode runner's).
TEST(FailureReasonTest, NamesEachKindOfFailure) {
  EXPECT_EQ(FailureReason(absl::DeadlineExceededError("late")), "deadline");
  EXPECT_EQ(FailureReason(absl::UnavailableError("down")), "unavailable");
  EXPECT_EQ(FailureReason(CircuitOpen(absl::UnavailableError("circuit open"))), "circuit_open");
  EXPECT_EQ(FailureReason(absl::InvalidArgumentError("nan")), "malformed");
  EXPECT_EQ(FailureReason(absl::InternalError("crash")), "call_failed");
}

}  // namespace
}  // namespace trellis::environment
