#include "loop/turn_format.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::loop {
namespace {

using ::testing::HasSubstr;

// Qwen2.5's template (tests/fixtures/chat/qwen25): tool results are user
// turns that wrap each result in <tool_response>.
PromptFormat Qwen25() {
  return PromptFormat(
      text::NewCharTokenizer(),
      chat::ChatTemplate::FromTokenizerConfig(TRELLIS_SOURCE_DIR "/tests/fixtures/chat/qwen25"));
}

data::Example ChatExample(const std::string& messages_json) {
  data::Example example;
  example.id = 3;
  example.messages_json = messages_json;
  return example;
}

std::vector<chat::Message> Messages(const std::string& json) {
  return *chat::ParseMessages(chat::Json::parse(json));
}

TEST(TurnFormat, PlainObservationsAreAppendedAsTheyAre) {
  const PromptFormat format = Qwen25();
  data::Example plain;
  plain.prompt = "1+2=";
  for (const data::Example* example : std::vector<const data::Example*>{nullptr, &plain}) {
    absl::StatusOr<std::unique_ptr<TurnFormat>> turns = NewTurnFormat(format, example);
    ASSERT_TRUE(turns.ok()) << turns.status();
    absl::StatusOr<TurnFormat::Rendered> opening = (*turns)->Open("Q:");
    ASSERT_TRUE(opening.ok());
    EXPECT_FALSE(opening->prompt.has_value());
    EXPECT_EQ(opening->text, "Q:");
    absl::StatusOr<TurnFormat::Rendered> next = (*turns)->AfterTurn("g1|", "o0;");
    ASSERT_TRUE(next.ok());
    EXPECT_FALSE(next->prompt.has_value());
    EXPECT_EQ(next->text, "o0;");
  }
}

// Each observation's text is the template's rendering of the conversation
// with the turn and the tool result, less the text so far: turn after turn,
// the episode stays the rendering of its whole conversation.
TEST(TurnFormat, ChatObservationsAreTheTemplatesRenderingDifference) {
  const PromptFormat format = Qwen25();
  const data::Example example = ChatExample(R"([{"role":"user","content":"Find x."}])");
  absl::StatusOr<std::unique_ptr<TurnFormat>> turns = NewTurnFormat(format, &example);
  ASSERT_TRUE(turns.ok()) << turns.status();
  const chat::ChatTemplate& chat = *format.ChatOf(example)->value().chat_template;
  std::vector<chat::Message> messages = Messages(example.messages_json);
  std::string text = *chat.Render(messages, nullptr, true);

  absl::StatusOr<TurnFormat::Rendered> opening = (*turns)->Open("");
  ASSERT_TRUE(opening.ok());
  EXPECT_FALSE(opening->prompt.has_value());  // nothing to say: the prompt as made
  EXPECT_EQ(opening->text, "");
  for (const auto& [turn, observation] : std::vector<std::pair<std::string, std::string>>{
           {"<tool_call>a</tool_call>", "x=1"}, {" b ", ""}}) {
    absl::StatusOr<TurnFormat::Rendered> next = (*turns)->AfterTurn(turn, observation);
    ASSERT_TRUE(next.ok()) << next.status();
    messages.push_back(chat::Message{"assistant", chat::Json(turn)});
    messages.push_back(chat::Message{"tool", chat::Json(observation)});
    const std::string rendered = *chat.Render(messages, nullptr, true);
    EXPECT_EQ(text + turn + next->text, rendered);
    EXPECT_EQ(next->text, "<|im_end|>\n<|im_start|>user\n<tool_response>\n" + observation +
                              "\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
    text = rendered;
  }
}

// The opening observation goes before the generation prompt, so it renders
// the prompt anew: a user message, or the tool result when the conversation
// ends with the assistant's tool calls.
TEST(TurnFormat, ChatOpeningObservationsArePartOfThePrompt) {
  const PromptFormat format = Qwen25();
  const std::string user = R"([{"role":"user","content":"Play."}])";
  const std::string calls =
      R"([{"role":"user","content":"Play."},{"role":"assistant","tool_calls":[)"
      R"({"type":"function","function":{"name":"start","arguments":{}}}]}])";
  for (const auto& [json, role] :
       std::vector<std::pair<std::string, std::string>>{{user, "user"}, {calls, "tool"}}) {
    const data::Example example = ChatExample(json);
    absl::StatusOr<std::unique_ptr<TurnFormat>> turns = NewTurnFormat(format, &example);
    ASSERT_TRUE(turns.ok()) << turns.status();
    absl::StatusOr<TurnFormat::Rendered> opening = (*turns)->Open("board: ...");
    ASSERT_TRUE(opening.ok()) << opening.status();
    std::vector<chat::Message> messages = Messages(json);
    messages.push_back(chat::Message{role, chat::Json("board: ...")});
    const chat::ChatTemplate& chat = *format.ChatOf(example)->value().chat_template;
    EXPECT_EQ(opening->prompt, *chat.Render(messages, nullptr, true)) << role;
    EXPECT_EQ(opening->text, "");
  }
}

TEST(TurnFormat, ATemplateThatIsNotPrefixStableIsNamed) {
  const PromptFormat format(
      text::NewCharTokenizer(),
      chat::ChatTemplate::Create(
          {{"default",
            "{{ messages | length }}{% for m in messages %}[{{ m.content }}]{% endfor %}"}},
          {}, "counting.jinja", env::Env::Default()));
  const data::Example example = ChatExample(R"([{"role":"user","content":"a"}])");
  absl::StatusOr<std::unique_ptr<TurnFormat>> turns = NewTurnFormat(format, &example);
  ASSERT_TRUE(turns.ok()) << turns.status();
  absl::StatusOr<TurnFormat::Rendered> next = (*turns)->AfterTurn("b", "c");
  EXPECT_EQ(next.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(next.status().message()),
              HasSubstr("counting.jinja: cannot continue the conversation token-exactly"));
}

TEST(TurnFormat, ChatExamplesNeedATemplate) {
  const PromptFormat format(text::NewCharTokenizer(), absl::NotFoundError("no template here"));
  const data::Example example = ChatExample(R"([{"role":"user","content":"a"}])");
  absl::Status s = NewTurnFormat(format, &example).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("example 3 holds messages, but no template here"));
}

}  // namespace
}  // namespace trellis::loop
