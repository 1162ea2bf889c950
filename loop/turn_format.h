#ifndef TRELLIS_LOOP_TURN_FORMAT_H_
#define TRELLIS_LOOP_TURN_FORMAT_H_

// What a multi-turn episode's sequence holds between the policy's turns
// (docs/multi-turn.md "Chat formats"). Plain prompts: each observation's
// text as it is. Chats: each observation as a message of the example's
// conversation, rendered as the model's chat template renders it, so that
// the sequence stays the template's rendering of the whole episode.

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "loop/prompt_format.h"

namespace trellis::loop {

// One episode's; a chat's holds its conversation so far.
class TurnFormat {
 public:
  // What an observation becomes in the episode's sequence.
  struct Rendered {
    // Open only: the episode's prompt text when the opening observation
    // changes it (a chat's is a message before the generation prompt);
    // nullopt: the prompt as loop/prompt_format.h made it.
    std::optional<std::string> prompt;
    // The text appended to the sequence.
    std::string text;
  };

  virtual ~TurnFormat() = default;

  // The environment's opening observation.
  [[nodiscard]] virtual absl::StatusOr<Rendered> Open(const std::string& observation) = 0;

  // The text that follows the policy's turn `turn` (its text as the actor
  // decoded it, the stop included) when the environment answers
  // `observation`. A chat template that cannot be continued token-exactly
  // fails, naming the template.
  [[nodiscard]] virtual absl::StatusOr<Rendered> AfterTurn(const std::string& turn,
                                                           const std::string& observation) = 0;
};

// The format of an episode of `example` (null: a plain prompt): the chat
// format when it holds messages, the plain one otherwise. Fails naming the
// example when its chat does not render.
[[nodiscard]] absl::StatusOr<std::unique_ptr<TurnFormat>> NewTurnFormat(
    const PromptFormat& format, const data::Example* example);

}  // namespace trellis::loop

#endif  // TRELLIS_LOOP_TURN_FORMAT_H_
