#ifndef TRELLIS_CHAT_MESSAGE_H_
#define TRELLIS_CHAT_MESSAGE_H_

// One message of a conversation as chat templates see it, parsed from the
// OpenAI-style JSON transformers takes: {"role", "content", "tool_calls",
// "tool_call_id", "name", ...}. Roles are the template's vocabulary (system,
// user, assistant, tool, ipython, ...), so they stay strings; only
// "assistant" means something to Trellis (RenderTurns).

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "jinja/value.h"

namespace trellis::chat {

using Json = jinja::Json;

struct Message {
  std::string role;
  // A string, or a list of content parts; null when absent.
  Json content;
  // The assistant's calls: [{"id", "type": "function", "function": {"name",
  // "arguments"}}]; null when absent.
  Json tool_calls;
  // A tool result's call id and tool name; empty when absent.
  std::string tool_call_id;
  std::string name;
  // Any other fields (reasoning_content, ...), in their order.
  Json extra = Json::object();

  bool is_assistant() const { return role == "assistant"; }
};

// Parses a `messages` array. Fields whose value is null are dropped, as
// transformers drops them. Errors name the index and the field:
// "messages[2].role: must be a string".
[[nodiscard]] absl::StatusOr<std::vector<Message>> ParseMessages(const Json& messages);

// The dict a template sees for `message`: role, content, tool_calls,
// tool_call_id, name, then the other fields; a message carrying reasoning
// (reasoning_content, thinking or reasoning) gets it under "thinking" first
// and "reasoning_content", as transformers aliases it.
Json MessageToTemplateData(const Message& message);

}  // namespace trellis::chat

#endif  // TRELLIS_CHAT_MESSAGE_H_
