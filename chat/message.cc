#include "chat/message.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace trellis::chat {
namespace {

constexpr const char* kReasoningFields[] = {"reasoning_content", "thinking", "reasoning"};

absl::Status FieldError(size_t index, const std::string& field, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("messages[", index, "].", field, ": ", problem));
}

}  // namespace

absl::StatusOr<std::vector<Message>> ParseMessages(const Json& messages) {
  if (!messages.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat("messages: must be a list of message objects, got ", messages.type_name()));
  }
  std::vector<Message> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    if (!m.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("messages[", i, "]: must be an object, got ", m.type_name()));
    }
    Message message;
    bool has_role = false;
    for (const auto& [key, value] : m.items()) {
      if (value.is_null()) continue;
      if (key == "role") {
        if (!value.is_string()) return FieldError(i, key, "must be a string");
        message.role = value.get<std::string>();
        has_role = true;
      } else if (key == "content") {
        if (!value.is_string() && !value.is_array() && !value.is_object()) {
          return FieldError(i, key, "must be a string or a list of content parts");
        }
        message.content = value;
      } else if (key == "tool_calls") {
        if (!value.is_array()) return FieldError(i, key, "must be a list");
        for (size_t c = 0; c < value.size(); ++c) {
          if (!value[c].is_object()) {
            return FieldError(i, absl::StrCat(key, "[", c, "]"), "must be an object");
          }
        }
        message.tool_calls = value;
      } else if (key == "tool_call_id" || key == "name") {
        if (!value.is_string()) return FieldError(i, key, "must be a string");
        (key == "name" ? message.name : message.tool_call_id) = value.get<std::string>();
      } else {
        message.extra[key] = value;
      }
    }
    if (!has_role) return FieldError(i, "role", "missing");
    out.push_back(std::move(message));
  }
  return out;
}

Json MessageToTemplateData(const Message& message) {
  Json data = Json::object();
  const Json* reasoning = nullptr;
  for (const char* field : kReasoningFields) {
    auto it = message.extra.find(field);
    if (it != message.extra.end()) {
      reasoning = &*it;
      break;
    }
  }
  if (reasoning) data["thinking"] = *reasoning;
  data["role"] = message.role;
  if (!message.content.is_null()) data["content"] = message.content;
  if (!message.tool_calls.is_null()) data["tool_calls"] = message.tool_calls;
  if (!message.tool_call_id.empty()) data["tool_call_id"] = message.tool_call_id;
  if (!message.name.empty()) data["name"] = message.name;
  for (const auto& [key, value] : message.extra.items()) data[key] = value;
  if (reasoning) data["reasoning_content"] = *reasoning;
  return data;
}

}  // namespace trellis::chat
