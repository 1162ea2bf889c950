#include "chat/message.h"

#include <gtest/gtest.h>

namespace trellis::chat {
namespace {

std::string ParseError(const Json& messages) {
  absl::StatusOr<std::vector<Message>> parsed = ParseMessages(messages);
  return parsed.ok() ? "parsed" : std::string(parsed.status().message());
}

TEST(MessageTest, ParsesFieldsAndDropsNulls) {
  absl::StatusOr<std::vector<Message>> parsed = ParseMessages(Json::parse(R"([
    {"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": {}}}]},
    {"role": "tool", "tool_call_id": "c1", "name": "f", "content": "ok", "extra": 1}])"));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_TRUE((*parsed)[0].is_assistant());
  EXPECT_TRUE((*parsed)[0].content.is_null());
  EXPECT_EQ((*parsed)[0].tool_calls.size(), 1u);
  EXPECT_EQ((*parsed)[1].tool_call_id, "c1");
  EXPECT_EQ((*parsed)[1].name, "f");
  EXPECT_EQ((*parsed)[1].extra, Json::parse(R"({"extra": 1})"));
  EXPECT_EQ(MessageToTemplateData((*parsed)[0]).dump(),
            R"({"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":{}}}]})");
}

TEST(MessageTest, ErrorsNameTheIndexAndField) {
  EXPECT_EQ(ParseError(Json::object()), "messages: must be a list of message objects, got object");
  EXPECT_EQ(ParseError(Json::parse(R"([{"role": "user"}, 3])")), "messages[1]: must be an object, got number");
  EXPECT_EQ(ParseError(Json::parse(R"([{"content": "hi"}])")), "messages[0].role: missing");
  EXPECT_EQ(ParseError(Json::parse(R"([{"role": 1}])")), "messages[0].role: must be a string");
  EXPECT_EQ(ParseError(Json::parse(R"([{"role": "user", "content": 5}])")),
            "messages[0].content: must be a string or a list of content parts");
  EXPECT_EQ(ParseError(Json::parse(R"([{"role": "assistant", "tool_calls": {}}])")),
            "messages[0].tool_calls: must be a list");
  EXPECT_EQ(ParseError(Json::parse(R"([{"role": "assistant", "tool_calls": [1]}])")),
            "messages[0].tool_calls[0]: must be an object");
  EXPECT_EQ(ParseError(Json::parse(R"([{"role": "tool", "tool_call_id": 7}])")),
            "messages[0].tool_call_id: must be a string");
}

TEST(MessageTest, ReasoningIsAliasedAsTransformersDoes) {
  absl::StatusOr<std::vector<Message>> parsed =
      ParseMessages(Json::parse(R"([{"role": "assistant", "reasoning": "r", "content": "c"}])"));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(MessageToTemplateData((*parsed)[0]).dump(),
            R"({"thinking":"r","role":"assistant","content":"c","reasoning":"r","reasoning_content":"r"})");
}

}  // namespace
}  // namespace trellis::chat
