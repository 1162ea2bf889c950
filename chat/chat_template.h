#ifndef TRELLIS_CHAT_CHAT_TEMPLATE_H_
#define TRELLIS_CHAT_CHAT_TEMPLATE_H_

// A model's chat template, rendered as transformers' apply_chat_template(
// messages, tools=..., tokenize=False, add_generation_prompt=...) renders it
// (trim_blocks and lstrip_blocks on; bos_token, eos_token and the other
// special tokens of tokenizer_config.json, raise_exception and strftime_now
// in scope), and split into the parts an assistant wrote, so that
// supervised fine-tuning can train on those tokens only.

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "chat/message.h"
#include "env/env.h"
#include "jinja/template.h"

namespace trellis::chat {

enum class SegmentKind { kPrompt, kAssistant };

struct Segment {
  SegmentKind kind = SegmentKind::kPrompt;
  std::string text;
};

class ChatTemplate {
 public:
  // Reads DIR/tokenizer_config.json: its chat_template (a string, or a list
  // of {"name", "template"}), replaced by DIR/chat_template.jinja when that
  // file exists (transformers 5 saves templates there), and its special
  // token strings (bos_token, eos_token, ...; plain or {"content": ...}).
  // `env` reads the files and gives strftime_now its clock.
  [[nodiscard]] static absl::StatusOr<ChatTemplate> FromTokenizerConfig(
      const std::string& dir, env::Env* env = env::Env::Default());

  // `templates` by name ("default"; "tool_use" is taken when tools are
  // given); `special_tokens` as {"bos_token": "<s>", ...}; `source` starts
  // every error.
  [[nodiscard]] static absl::StatusOr<ChatTemplate> Create(
      const std::map<std::string, std::string>& templates,
      std::map<std::string, std::string> special_tokens, const std::string& source, env::Env* env);

  // The rendered conversation. `tools` is a list of JSON schemas or null.
  [[nodiscard]] absl::StatusOr<std::string> Render(const std::vector<Message>& messages,
                                                   const Json& tools,
                                                   bool add_generation_prompt) const;

  // Render(messages, tools, false) cut into consecutive segments, each
  // assistant message's own text marked kAssistant: the text between
  // Render(messages[:i], add_generation_prompt=true) and
  // Render(messages[:i+1]). Refused, naming the message, where the template
  // renders a prefix of the conversation differently from the start of the
  // whole (templates that drop earlier turns' reasoning, or that move the
  // system prompt to the last user message).
  [[nodiscard]] absl::StatusOr<std::vector<Segment>> RenderTurns(
      const std::vector<Message>& messages, const Json& tools) const;

  // What the template renders after `so_far` for `messages` with the
  // generation prompt: Render(messages, tools, true) less its start, which
  // must be exactly `so_far` (an earlier rendering of the conversation
  // followed by the text a model wrote). Refused, naming the template and
  // where the two part, when it is not: the template cannot then be
  // continued token-exactly (multi-turn episodes, docs/multi-turn.md).
  [[nodiscard]] absl::StatusOr<std::string> Continue(const std::string& so_far,
                                                     const std::vector<Message>& messages,
                                                     const Json& tools) const;

 private:
  ChatTemplate() = default;
  absl::StatusOr<const jinja::Template*> Select(const Json& tools) const;

  std::map<std::string, jinja::Template> templates_;
  std::map<std::string, std::string> special_tokens_;
  std::string source_;
  env::Env* env_ = nullptr;
};

}  // namespace trellis::chat

#endif  // TRELLIS_CHAT_CHAT_TEMPLATE_H_
