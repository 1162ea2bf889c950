#include "loop/turn_format.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "loop/loop_util.h"

namespace trellis::loop {
namespace {

class PlainTurns final : public TurnFormat {
 public:
  absl::StatusOr<Rendered> Open(const std::string& observation) override {
    return Rendered{std::nullopt, observation};
  }
  absl::StatusOr<Rendered> AfterTurn(const std::string&, const std::string& observation) override {
    return Rendered{std::nullopt, observation};
  }
};

chat::Message Said(const std::string& role, const std::string& content) {
  chat::Message message;
  message.role = role;
  message.content = chat::Json(content);
  return message;
}

class ChatTurns final : public TurnFormat {
 public:
  // `so_far`: the prompt's text, `chat` rendered with the generation prompt.
  ChatTurns(ExampleChat chat, std::string so_far)
      : chat_(std::move(chat)), so_far_(std::move(so_far)) {}

  // A tool result when the conversation ends with the assistant's tool
  // calls, what the user says otherwise; it goes before the generation
  // prompt, so the prompt is rendered anew.
  absl::StatusOr<Rendered> Open(const std::string& observation) override {
    if (observation.empty()) return Rendered{};
    const bool calls = !chat_.messages.empty() && chat_.messages.back().is_assistant() &&
                       !chat_.messages.back().tool_calls.is_null();
    chat_.messages.push_back(Said(calls ? "tool" : "user", observation));
    absl::StatusOr<std::string> prompt =
        chat_.chat_template->Render(chat_.messages, chat_.tools, /*add_generation_prompt=*/true);
    if (!prompt.ok()) return prompt.status();
    so_far_ = *prompt;
    return Rendered{*std::move(prompt), ""};
  }

  // The policy's turn as an assistant message, the observation as the tool
  // result that answers it: what the template renders after the turn's own
  // text, through the next generation prompt.
  absl::StatusOr<Rendered> AfterTurn(const std::string& turn,
                                     const std::string& observation) override {
    chat_.messages.push_back(Said("assistant", turn));
    chat_.messages.push_back(Said("tool", observation));
    absl::StatusOr<std::string> next =
        chat_.chat_template->Continue(so_far_ + turn, chat_.messages, chat_.tools);
    if (!next.ok()) return next.status();
    absl::StrAppend(&so_far_, turn, *next);
    return Rendered{std::nullopt, *std::move(next)};
  }

 private:
  ExampleChat chat_;
  std::string so_far_;  // the episode's sequence as text
};

}  // namespace

absl::StatusOr<std::unique_ptr<TurnFormat>> NewTurnFormat(const PromptFormat& format,
                                                          const data::Example* example) {
  if (example == nullptr) return std::make_unique<PlainTurns>();
  const std::string where = absl::StrCat("example ", example->id);
  absl::StatusOr<std::optional<ExampleChat>> chat = format.ChatOf(*example);
  if (!chat.ok()) return At(chat.status(), where);
  if (!chat->has_value()) return std::make_unique<PlainTurns>();
  absl::StatusOr<std::string> prompt = (*chat)->chat_template->Render(
      (*chat)->messages, (*chat)->tools, /*add_generation_prompt=*/true);
  if (!prompt.ok()) return At(prompt.status(), where);
  return std::make_unique<ChatTurns>(**std::move(chat), *std::move(prompt));
}

}  // namespace trellis::loop
