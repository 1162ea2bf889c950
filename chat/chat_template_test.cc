#include "chat/chat_template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/civil_time.h"
#include "env/testing/fake_env.h"

namespace trellis::chat {
namespace {

using ::testing::HasSubstr;

const std::string kFixtures = TRELLIS_SOURCE_DIR "/tests/fixtures/chat";
const char* const kTemplates[] = {"llama31", "qwen25", "qwen3", "mistral", "chatml"};

Json ReadJson(const std::string& path) {
  absl::StatusOr<std::string> text = env::Env::Default()->ReadFile(path);
  EXPECT_TRUE(text.ok()) << text.status();
  return Json::parse(text.value_or("null"));
}

// strftime_now reads the clock at 26 Jul 2024 12:00 UTC, as the fixtures
// were rendered.
class ChatTemplateTest : public ::testing::Test {
 protected:
  ChatTemplateTest() {
    const absl::Time pinned = absl::FromCivil(absl::CivilSecond(2024, 7, 26, 12, 0, 0), absl::UTCTimeZone());
    env_.Advance(pinned - env_.Now());
  }

  ChatTemplate Load(const std::string& name) {
    absl::StatusOr<ChatTemplate> chat = ChatTemplate::FromTokenizerConfig(kFixtures + "/" + name, &env_);
    EXPECT_TRUE(chat.ok()) << chat.status();
    return *std::move(chat);
  }

  static std::vector<Message> Messages(const Json& conversation) {
    absl::StatusOr<std::vector<Message>> messages = ParseMessages(conversation["messages"]);
    EXPECT_TRUE(messages.ok()) << messages.status();
    return messages.value_or(std::vector<Message>{});
  }

  static Json Tools(const Json& conversation) { return conversation.value("tools", Json()); }

  env::testing::FakeEnv env_;
  Json conversations_ = ReadJson(kFixtures + "/conversations.json");
};

TEST_F(ChatTemplateTest, EveryFixtureRendersByteForByteAsTransformers) {
  int checked = 0;
  for (const char* name : kTemplates) {
    const ChatTemplate chat = Load(name);
    const Json all_expected = ReadJson(kFixtures + "/" + name + "/expected.json");
    for (const auto& [conv, expected] : all_expected.items()) {
      SCOPED_TRACE(absl::StrCat(name, " ", conv));
      const Json& c = conversations_[conv];
      for (const bool generation : {true, false}) {
        absl::StatusOr<std::string> out = chat.Render(Messages(c), Tools(c), generation);
        ASSERT_TRUE(out.ok()) << out.status();
        EXPECT_EQ(*out, expected[generation ? "prompt" : "full"].get<std::string>());
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 2 * (5 + 6 + 7 + 5 + 4));
}

// The segments put back together are the whole render, and the assistant
// segments are exactly the assistant messages' text.
TEST_F(ChatTemplateTest, TurnsSplitTheRenderAtAssistantMessages) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"llama31", "basic"},  {"llama31", "multi_turn"}, {"llama31", "tools"},  {"qwen25", "multi_turn"},
      {"qwen25", "tools"},   {"qwen25", "two_tool_calls"}, {"qwen3", "basic"}, {"mistral", "basic"},
      {"mistral", "multi_turn"}, {"chatml", "multi_turn"}, {"chatml", "empty"}};
  for (const auto& [name, conv] : cases) {
    SCOPED_TRACE(absl::StrCat(name, " ", conv));
    const ChatTemplate chat = Load(name);
    const Json& c = conversations_[conv];
    const std::vector<Message> messages = Messages(c);
    absl::StatusOr<std::vector<Segment>> turns = chat.RenderTurns(messages, Tools(c));
    ASSERT_TRUE(turns.ok()) << turns.status();
    std::string joined;
    std::vector<std::string> assistant;
    for (const Segment& s : *turns) {
      joined += s.text;
      if (s.kind == SegmentKind::kAssistant) assistant.push_back(s.text);
    }
    EXPECT_EQ(joined, *chat.Render(messages, Tools(c), false));
    size_t k = 0;
    for (const Message& m : messages) {
      if (!m.is_assistant()) continue;
      ASSERT_LT(k, assistant.size());
      if (m.content.is_string()) EXPECT_THAT(assistant[k], HasSubstr(m.content.get<std::string>()));
      ++k;
    }
    EXPECT_EQ(k, assistant.size());
  }
}

TEST_F(ChatTemplateTest, AssistantSegmentsEndWithTheEndOfTurn) {
  const Json& c = conversations_["multi_turn"];
  absl::StatusOr<std::vector<Segment>> turns = Load("chatml").RenderTurns(Messages(c), Json());
  ASSERT_TRUE(turns.ok()) << turns.status();
  ASSERT_EQ(turns->size(), 4u);
  EXPECT_EQ((*turns)[0].kind, SegmentKind::kPrompt);
  EXPECT_EQ((*turns)[0].text, "<|im_start|>user\nBonjour ! Ça va ? 👋<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ((*turns)[1].kind, SegmentKind::kAssistant);
  EXPECT_EQ((*turns)[1].text, "Très bien, merci.\nEt vous ?<|im_end|>\n");
  EXPECT_EQ((*turns)[3].kind, SegmentKind::kAssistant);
  EXPECT_EQ((*turns)[3].text, "Japanese (the language).<|im_end|>\n");
}

// Qwen3 shows an empty think block on the last assistant message only, so a
// conversation cut after an earlier one renders that one differently.
TEST_F(ChatTemplateTest, TurnsRefuseTemplatesThatRewriteEarlierTurns) {
  const Json& c = conversations_["multi_turn"];
  absl::StatusOr<std::vector<Segment>> turns = Load("qwen3").RenderTurns(Messages(c), Json());
  EXPECT_EQ(turns.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(turns.status().message()), HasSubstr("cannot mark messages[1] (assistant)"));
}

// A tool result after a model's turn: what Qwen2.5 renders after the turn's
// exact text, its end of turn included, through the next generation prompt.
TEST_F(ChatTemplateTest, ContinueRendersWhatFollowsTheTextSoFar) {
  const ChatTemplate chat = Load("qwen25");
  std::vector<Message> messages =
      *ParseMessages(Json::parse(R"([{"role": "user", "content": "2+2?"}])"));
  const std::string prompt = *chat.Render(messages, Json(), true);
  const std::string turn = "<tool_call>\n{\"name\": \"add\"}\n</tool_call>";
  messages.push_back(Message{"assistant", Json(turn)});
  messages.push_back(Message{"tool", Json("4")});
  absl::StatusOr<std::string> next = chat.Continue(prompt + turn, messages, Json());
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next,
            "<|im_end|>\n<|im_start|>user\n<tool_response>\n4\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(prompt + turn + *next, *chat.Render(messages, Json(), true));
}

// A template that writes the number of messages first renders no
// conversation as the start of a longer one.
TEST_F(ChatTemplateTest, ContinueRefusesTemplatesThatAreNotPrefixStable) {
  const ChatTemplate chat = *ChatTemplate::Create(
      {{"default", "{{ messages | length }}{% for m in messages %}[{{ m.content }}]{% endfor %}"}},
      {}, "counting.jinja", &env_);
  const std::vector<Message> one =
      *ParseMessages(Json::parse(R"([{"role": "user", "content": "a"}])"));
  const std::vector<Message> two = *ParseMessages(
      Json::parse(R"([{"role": "user", "content": "a"}, {"role": "tool", "content": "b"}])"));
  absl::StatusOr<std::string> next = chat.Continue(*chat.Render(one, Json(), true), two, Json());
  EXPECT_EQ(next.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(next.status().message()),
              HasSubstr("counting.jinja: cannot continue the conversation token-exactly"));
  EXPECT_THAT(std::string(next.status().message()), HasSubstr("they part at byte 0"));
}

TEST_F(ChatTemplateTest, RaiseExceptionBecomesAnErrorNamingTheTemplate) {
  const Json bad = Json::parse(R"([{"role": "system", "content": "s"}, {"role": "system", "content": "t"}])");
  absl::StatusOr<std::string> out = Load("mistral").Render(*ParseMessages(bad), Json(), true);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(out.status().message()),
              HasSubstr("tokenizer_config.json: line 32, column 28: the template raised an exception: After the "
                        "system message only user, assistant and tool roles are supported, got system"));
}

TEST_F(ChatTemplateTest, DirectoryErrors) {
  EXPECT_THAT(std::string(ChatTemplate::FromTokenizerConfig(kFixtures + "/missing", &env_).status().message()),
              HasSubstr("missing/tokenizer_config.json"));
  absl::StatusOr<ChatTemplate> broken =
      ChatTemplate::Create({{"default", "{% for m in messages %}"}}, {}, "t.json", &env_);
  EXPECT_EQ(std::string(broken.status().message()),
            "t.json template 'default': line 1, column 4: 'for' is never closed with 'endfor'");
  absl::StatusOr<ChatTemplate> unnamed = ChatTemplate::Create({{"rag", "x"}}, {}, "t.json", &env_);
  ASSERT_TRUE(unnamed.ok());
  EXPECT_EQ(std::string(unnamed->Render({}, Json(), true).status().message()),
            "t.json: no template named 'default' among rag");
}

}  // namespace
}  // namespace trellis::chat
