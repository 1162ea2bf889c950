// Chat templates (chat/chat_template.h on the Jinja engine in jinja/): any
// template parses or fails with a status, and a parsed one renders a
// conversation (the input's own, when it is a valid messages array, else a
// fixed one) with and without the generation prompt and cut into turns, or
// fails with a status. The input is the messages JSON, a backslash, then
// the template.

#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "env/env.h"

namespace {

using trellis::chat::Json;

constexpr char kConversation[] = R"([
  {"role": "system", "content": "Be brief."},
  {"role": "user", "content": "What is 2 + 3?"},
  {"role": "assistant", "content": "5", "reasoning_content": "2 + 3 = 5"},
  {"role": "user", "content": [{"type": "text", "text": "And 4 * 5?"}]},
  {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
    "function": {"name": "calc", "arguments": {"expr": "4*5"}}}]},
  {"role": "tool", "tool_call_id": "c1", "name": "calc", "content": "20"},
  {"role": "assistant", "content": "20"}])";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const std::string messages_json = in.ConsumeRandomLengthString(4096);
  const std::string source = in.ConsumeRemainingBytesAsString();
  auto chat = trellis::chat::ChatTemplate::Create({{"default", source}},
                                                  {{"bos_token", "<s>"}, {"eos_token", "</s>"}},
                                                  "fuzz", trellis::env::Env::Default());
  if (!chat.ok()) return 0;
  Json parsed = Json::parse(messages_json, nullptr, /*allow_exceptions=*/false);
  auto messages = trellis::chat::ParseMessages(parsed);
  if (!messages.ok()) messages = trellis::chat::ParseMessages(Json::parse(kConversation));
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "calc"}}])");
  (void)chat->Render(*messages, nullptr, true);
  (void)chat->Render(*messages, tools, false);
  (void)chat->RenderTurns(*messages, nullptr);
  return 0;
}
