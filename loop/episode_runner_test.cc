#include "loop/episode_runner.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loop/testing/fake_environment.h"

namespace trellis::loop {
namespace {

using testing::FakeEnvironment;
using testing::FakeTurnActor;
using ::testing::HasSubstr;
using testing::PartByPartActor;

const char kAlphabet[] =
    "\n !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`"
    "abcdefghijklmnopqrstuvwxyz{|}~";
const char kQwen25[] = TRELLIS_SOURCE_DIR "/tests/fixtures/chat/qwen25";

class EpisodeRunnerTest : public ::testing::Test {
 protected:
  EpisodeRunnerTest() : actor_(&format_.tokenizer()) {
    job_.mutable_model()->set_max_seq_len(64);
    v1::EnvironmentConfig* env = job_.mutable_environment();
    env->set_name("fake");
    env->set_turn_stop("|");
    env->set_max_turns(4);
    env->set_workers(4);
    env->set_episode_deadline_ms(60000);
    env->set_failure_reward(-1);
  }

  // Prompts "ab", "cdefg", ... (ids 0, 1, ...) with `group` responses each.
  v1::GenerateRequest Request(int prompts, int group, int first = 0) {
    v1::GenerateRequest request;
    request.set_responses_per_prompt(group);
    request.set_seed(77);
    request.mutable_sampling()->set_temperature(1);
    request.mutable_sampling()->set_max_new_tokens(8);
    const std::vector<std::string> texts = {"ab", "cdefg", "hi", "jklm"};
    for (int p = first; p < first + prompts; ++p) {
      v1::Prompt* prompt = request.add_prompts();
      prompt->set_id(p);
      prompt->set_text(texts[p]);
      prompt->add_token_ids(*format_.tokenizer().bos_id());
      for (int32_t id : Encode(texts[p])) prompt->add_token_ids(id);
    }
    return request;
  }

  std::vector<int32_t> Encode(const std::string& text) { return *format_.tokenizer().Encode(text); }

  absl::StatusOr<EpisodeResults> TryRun(const v1::GenerateRequest& request,
                                        const std::vector<const data::Example*>& examples,
                                        const PromptFormat& format) {
    EpisodeRunner runner(job_, &actor_, &env_, &format, [this] { return env_.Now(); });
    return runner.Run(request, examples);
  }

  EpisodeResults Run(const v1::GenerateRequest& request,
                     const std::vector<const data::Example*>& examples = {}) {
    absl::StatusOr<EpisodeResults> results = TryRun(request, examples, format_);
    EXPECT_TRUE(results.ok()) << results.status();
    EXPECT_EQ(env_.closed, env_.opened);
    return results.ok() ? *std::move(results) : EpisodeResults();
  }

  v1::JobConfig job_;
  // The character tokenizer (printable ASCII and the newline) and Qwen2.5's
  // chat template, for the examples that hold messages.
  PromptFormat format_{text::NewCharTokenizer(kAlphabet),
                       chat::ChatTemplate::FromTokenizerConfig(kQwen25)};
  FakeTurnActor actor_;
  FakeEnvironment env_;
};

// The response is the first observation, then each turn exactly as the
// policy produced it (the stop kept) and the observation after it; only the
// policy's tokens are trained and carry log-probs.
TEST_F(EpisodeRunnerTest, SequenceLayoutAndMasks) {
  env_.done_at_turn = 1;
  const v1::GenerateRequest request = Request(1, 2);
  const EpisodeResults results = Run(request);
  ASSERT_EQ(results.rollout.samples_size(), 2);
  for (int i = 0; i < 2; ++i) {
    const v1::Sample& s = results.rollout.samples(i);
    const std::string id = "77-0-0-" + std::to_string(i);
    ASSERT_EQ(env_.actions[id].size(), 2u) << id;
    const std::string a0 = env_.actions[id][0], a1 = env_.actions[id][1];
    EXPECT_EQ(a0.size(), 3u);
    EXPECT_EQ(a0.back(), '|');
    const std::vector<int32_t> expected = Encode("Q:" + a0 + "o0;" + a1);
    EXPECT_EQ(std::vector<int32_t>(s.response_tokens().begin(), s.response_tokens().end()),
              expected);
    EXPECT_EQ(
        std::vector<bool>(s.trained().begin(), s.trained().end()),
        (std::vector<bool>{false, false, true, true, true, false, false, false, true, true, true}));
    EXPECT_EQ(std::vector<float>(s.logprobs().begin(), s.logprobs().end()),
              (std::vector<float>{0, 0, -0.1f, -0.2f, -0.3f, 0, 0, 0, -0.1f, -0.2f, -0.3f}));
    EXPECT_EQ(s.prompt_tokens().size(), 3);  // BOS and "ab": the prompt as it was
    for (int k = 0; k < 3; ++k) EXPECT_EQ(s.prompt_tokens(k), request.prompts(0).token_ids(k));
    EXPECT_EQ(s.turns(), 2);
    EXPECT_EQ(s.episode_end(), v1::DONE);
    EXPECT_EQ(s.index(), i);
    EXPECT_FALSE(s.truncated());
    EXPECT_FLOAT_EQ(results.rewards[i], 1.0f);
  }
  const v1::EnvironmentStats& stats = results.stats;
  EXPECT_EQ(stats.environment(), "fake");
  EXPECT_EQ(stats.episodes(), 2);
  EXPECT_EQ(stats.turns(), 4);
  EXPECT_EQ(stats.max_turns(), 2);
  EXPECT_EQ(stats.policy_tokens(), 12);
  EXPECT_EQ(stats.environment_tokens(), 10);
  EXPECT_EQ(stats.ended_by().at("done"), 2);
  EXPECT_EQ(env_.seeds.size(), 2u);
}

TEST_F(EpisodeRunnerTest, EndsAtMaxTurns) {
  job_.mutable_environment()->set_max_turns(2);
  const v1::Sample s = Run(Request(1, 1)).rollout.samples(0);
  EXPECT_EQ(s.episode_end(), v1::MAX_TURNS);
  EXPECT_EQ(s.turns(), 2);
}

// An observation past environment.max_tokens is cut there.
TEST_F(EpisodeRunnerTest, EndsAtMaxTokens) {
  job_.mutable_environment()->set_max_tokens(10);  // prompt 3 + "Q:" + turn 3 + 2 of "o0;"
  const EpisodeResults results = Run(Request(1, 1));
  const v1::Sample& s = results.rollout.samples(0);
  EXPECT_EQ(s.episode_end(), v1::MAX_TOKENS);
  EXPECT_TRUE(s.truncated());
  EXPECT_EQ(s.prompt_tokens_size() + s.response_tokens_size(), 10);
  EXPECT_EQ(s.turns(), 1);
  EXPECT_EQ(results.stats.ended_by().at("max_tokens"), 1);
}

// A turn that hits max_turn_tokens without its stop ends the episode.
TEST_F(EpisodeRunnerTest, ATurnCutShortEndsAtMaxTokens) {
  job_.mutable_environment()->set_max_turn_tokens(2);
  const v1::Sample s = Run(Request(1, 1)).rollout.samples(0);
  EXPECT_EQ(s.episode_end(), v1::MAX_TOKENS);
  EXPECT_EQ(s.turns(), 0);
  EXPECT_EQ(s.response_tokens_size(), 4);  // "Q:" and the two tokens
}

TEST_F(EpisodeRunnerTest, EndsWhenThePolicyStops) {
  actor_.eos_at_length = 0;
  const EpisodeResults results = Run(Request(1, 1));
  const v1::Sample& s = results.rollout.samples(0);
  EXPECT_EQ(s.episode_end(), v1::POLICY_STOPPED);
  EXPECT_EQ(s.turns(), 0);
  EXPECT_EQ(s.response_tokens(s.response_tokens_size() - 1), format_.tokenizer().eos_id());
  EXPECT_FLOAT_EQ(results.rewards[0], 0.0f);
}

TEST_F(EpisodeRunnerTest, EndsAtTheEpisodeDeadline) {
  env_.step_seconds = 10;
  job_.mutable_environment()->set_episode_deadline_ms(15000);
  const EpisodeResults results = Run(Request(1, 1));
  EXPECT_EQ(results.rollout.samples(0).episode_end(), v1::EPISODE_DEADLINE);
  EXPECT_EQ(results.rollout.samples(0).turns(), 2);
  EXPECT_EQ(results.stats.ended_by().at("episode_deadline"), 1);
  EXPECT_DOUBLE_EQ(results.stats.wait_seconds(), 20);
}

// A failed call ends its episode with the failure reward; the others go on.
TEST_F(EpisodeRunnerTest, AnEnvironmentFailureEndsOnlyItsEpisode) {
  env_.done_at_turn = 1;
  env_.fail_prefix = "77-1-";
  const EpisodeResults results = Run(Request(2, 2));
  ASSERT_EQ(results.rollout.samples_size(), 4);
  for (int i = 0; i < 4; ++i) {
    const v1::Sample& s = results.rollout.samples(i);
    const bool failing = s.prompt_id() == 1;
    EXPECT_EQ(s.episode_end(), failing ? v1::ENVIRONMENT_FAILED : v1::DONE) << i;
    EXPECT_EQ(s.turns(), failing ? 1 : 2) << i;
    EXPECT_FLOAT_EQ(results.rewards[i], failing ? -1.0f : 1.0f) << i;
  }
  EXPECT_EQ(results.stats.errors_by_reason().at("unavailable"), 2);
  EXPECT_EQ(results.stats.ended_by().at("environment_failed"), 2);
  EXPECT_EQ(env_.closed.size(), 4u);
}

// An episode whose Open failed has no response and is not closed.
TEST_F(EpisodeRunnerTest, AFailedOpenEndsItsEpisode) {
  env_.done_at_turn = 0;
  env_.fail_open_prefix = "77-0-";
  const EpisodeResults results = Run(Request(2, 1));
  const v1::Sample& failed = results.rollout.samples(0);
  EXPECT_EQ(failed.episode_end(), v1::ENVIRONMENT_FAILED);
  EXPECT_EQ(failed.response_tokens_size(), 0);
  EXPECT_FLOAT_EQ(results.rewards[0], -1.0f);
  EXPECT_EQ(results.rollout.samples(1).episode_end(), v1::DONE);
  EXPECT_EQ(env_.closed, (std::set<std::string>{"77-1-0-0"}));
  EXPECT_EQ(results.stats.errors_by_reason().at("deadline"), 1);
  EXPECT_EQ(results.stats.timeouts(), 1);
}

// Steps of different episodes run at once, environment.workers of them.
TEST_F(EpisodeRunnerTest, StepsRunConcurrentlyUpToTheWorkers) {
  job_.mutable_environment()->set_workers(3);
  job_.mutable_environment()->set_max_turns(1);
  env_.rendezvous = 3;
  Run(Request(2, 3));
  EXPECT_EQ(env_.most_in_flight, 3);
}

// An episode's Step starts as soon as the actor hands over its turn, while
// the actor still generates the round's other turns (a lockstep runner
// would never enter it, and the actor's wait would time out), and the
// episodes are exactly those of a run that hands each round over whole.
TEST_F(EpisodeRunnerTest, AnEpisodesStepOverlapsTheOthersGeneration) {
  env_.done_at_turn = 2;
  env_.step_seconds = 1;
  const v1::GenerateRequest request = Request(2, 2);
  const EpisodeResults whole = Run(request);
  FakeEnvironment env;
  env.done_at_turn = 2;
  env.step_seconds = 1;
  PartByPartActor streaming(&actor_, &env, 0);
  EpisodeRunner runner(job_, &streaming, &env, &format_, [&env] { return env.Now(); });
  absl::StatusOr<EpisodeResults> parts = runner.Run(request, {});
  ASSERT_TRUE(parts.ok()) << parts.status();
  EXPECT_EQ(streaming.waited, 3);
  EXPECT_EQ(streaming.overlapped, 3);
  EXPECT_EQ(env.actions, env_.actions);
  EXPECT_EQ(parts->rewards, whole.rewards);
  ASSERT_EQ(parts->rollout.samples_size(), 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(parts->rollout.samples(i).SerializeAsString(),
              whole.rollout.samples(i).SerializeAsString())
        << i;
  }
  EXPECT_EQ(parts->stats.turns(), whole.stats.turns());
  EXPECT_EQ(parts->stats.policy_tokens(), whole.stats.policy_tokens());
  EXPECT_EQ(parts->stats.environment_tokens(), whole.stats.environment_tokens());
  // Steps take a second each on the fake clock; what the runner waited with
  // no generation running is part of what the calls waited.
  EXPECT_GE(parts->stats.wait_seconds(), 12);
  EXPECT_LE(parts->stats.unoverlapped_wait_seconds(), parts->stats.wait_seconds());
}

// An episode's turns do not depend on which other episodes share its
// rounds: prompts run together sample what they sample alone, though they
// end at different turns.
TEST_F(EpisodeRunnerTest, EpisodesDoNotDependOnTheBatch) {
  actor_.eos_at_length = 14;
  const EpisodeResults together = Run(Request(2, 2));
  std::map<int, int> turns;
  for (const v1::Sample& s : together.rollout.samples()) turns[s.turns()]++;
  EXPECT_GE(turns.size(), 2u);
  const EpisodeResults first = Run(Request(1, 2, 0));
  const EpisodeResults second = Run(Request(1, 2, 1));
  ASSERT_EQ(together.rollout.samples_size(), 4);
  for (int i = 0; i < 4; ++i) {
    const v1::Sample& alone = (i < 2 ? first : second).rollout.samples(i % 2);
    EXPECT_EQ(together.rollout.samples(i).SerializeAsString(), alone.SerializeAsString()) << i;
  }
}

// A chat example's episode is the template's rendering of the whole
// conversation: the opening observation a user message of the prompt, each
// turn exactly as generated, then what Qwen2.5 renders for the turn as an
// assistant message and the observation as the tool result, through the
// next generation prompt.
TEST_F(EpisodeRunnerTest, ChatObservationsAreRenderedAsTheTemplateRendersThem) {
  job_.mutable_model()->set_max_seq_len(4096);
  env_.done_at_turn = 1;
  data::Example example;
  example.messages_json = R"([{"role":"user","content":"Guess."}])";
  v1::GenerateRequest request = Request(0, 1);
  *request.add_prompts() = *format_.MakePrompt(example);
  const EpisodeResults results = Run(request, {&example});
  ASSERT_EQ(results.rollout.samples_size(), 1);
  const v1::Sample& s = results.rollout.samples(0);
  const std::vector<std::string>& actions = env_.actions["77-0-0-0"];
  ASSERT_EQ(actions.size(), 2u);
  const chat::ChatTemplate chat = *chat::ChatTemplate::FromTokenizerConfig(kQwen25);
  std::vector<chat::Message> messages = *chat::ParseMessages(
      chat::Json::parse(R"([{"role":"user","content":"Guess."},{"role":"user","content":"Q:"}])"));
  const std::string prompt = *chat.Render(messages, nullptr, true);
  EXPECT_EQ(std::vector<int32_t>(s.prompt_tokens().begin(), s.prompt_tokens().end()),
            Encode(prompt));
  const std::string between =
      "<|im_end|>\n<|im_start|>user\n<tool_response>\no0;\n</tool_response><|im_end|>\n"
      "<|im_start|>assistant\n";
  EXPECT_EQ(std::vector<int32_t>(s.response_tokens().begin(), s.response_tokens().end()),
            Encode(actions[0] + between + actions[1]));
  std::vector<bool> trained(3, true);
  trained.insert(trained.end(), between.size(), false);
  trained.insert(trained.end(), 3, true);
  EXPECT_EQ(std::vector<bool>(s.trained().begin(), s.trained().end()), trained);
  messages.push_back(chat::Message{"assistant", chat::Json(actions[0])});
  messages.push_back(chat::Message{"tool", chat::Json("o0;")});
  EXPECT_EQ(prompt + actions[0] + between, *chat.Render(messages, nullptr, true));
  EXPECT_EQ(results.stats.environment_tokens(), static_cast<int64_t>(between.size()));
}

// A template that renders a longer conversation with a different start
// cannot be continued token-exactly: the run fails naming it, and every
// episode is still closed.
TEST_F(EpisodeRunnerTest, ATemplateThatIsNotPrefixStableFailsTheRun) {
  job_.mutable_model()->set_max_seq_len(4096);
  PromptFormat counting(
      text::NewCharTokenizer(kAlphabet),
      chat::ChatTemplate::Create(
          {{"default",
            "{{ messages | length }}{% for m in messages %}[{{ m.content }}]{% endfor %}"}},
          {}, "counting.jinja", env::Env::Default()));
  data::Example example;
  example.messages_json = R"([{"role":"user","content":"Guess."}])";
  v1::GenerateRequest request = Request(0, 2);
  *request.add_prompts() = *counting.MakePrompt(example);
  absl::StatusOr<EpisodeResults> results = TryRun(request, {&example}, counting);
  EXPECT_EQ(results.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(results.status().message()),
              HasSubstr("counting.jinja: cannot continue the conversation token-exactly"));
  EXPECT_THAT(std::string(results.status().message()), HasSubstr("episode 77-0-0-"));
  EXPECT_EQ(env_.opened.size(), 2u);
  EXPECT_EQ(env_.closed, env_.opened);
}

}  // namespace
}  // namespace trellis::loop
