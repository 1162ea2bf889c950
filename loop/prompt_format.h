#ifndef TRELLIS_LOOP_PROMPT_FORMAT_H_
#define TRELLIS_LOOP_PROMPT_FORMAT_H_

// How a job's examples become the token ids its models read: plain prompts
// (BOS where the tokenizer has one, then the prompt's tokens), or chats
// (a dataset line's "messages") rendered with the model's chat template
// and the generation prompt, as transformers' apply_chat_template renders
// them. Supervised targets of a chat are its assistant turns only.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "chat/chat_template.h"
#include "data/dataset.h"
#include "text/tokenizer.h"
#include "trellis/v1/job.pb.h"
#include "trellis/v1/rollout.pb.h"

namespace trellis::loop {

// A chat example's conversation and the template that renders it.
struct ExampleChat {
  const chat::ChatTemplate* chat_template = nullptr;
  std::vector<chat::Message> messages;
  chat::Json tools;  // the example's metadata's "tools"; null when none
};

class PromptFormat {
 public:
  // The job's: without model.path, the character tokenizer; with it, the
  // directory's tokenizer (text::LoadHfTokenizer) and its chat template
  // when it has one. Errors name model.path.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<PromptFormat>> ForJob(
      const v1::JobConfig& job);

  // `chat_template`: the model's, or why it has none (reported when a chat
  // example needs it).
  PromptFormat(std::unique_ptr<text::Tokenizer> tokenizer,
               absl::StatusOr<chat::ChatTemplate> chat_template);

  const text::Tokenizer& tokenizer() const { return *tokenizer_; }

  // The example's prompt as the model reads it; id, text and answer copied
  // (a chat's text is its rendering). Fails naming the example.
  [[nodiscard]] absl::StatusOr<v1::Prompt> MakePrompt(const data::Example& example) const;

  // A response's tokens as the model produces them: the text's tokens, then
  // the primary EOS. Fails naming `what` (e.g. "answer of example 3").
  [[nodiscard]] absl::StatusOr<std::vector<int32_t>> ResponseTokens(const std::string& text,
                                                                    const std::string& what) const;

  // A supervised pair. Plain: the prompt (MakePrompt) and the answer's
  // response tokens. Chat: the conversation, with the answer (when there is
  // one) as a last assistant turn, rendered turn by turn
  // (chat::ChatTemplate::RenderTurns); the prompt is everything before the
  // first assistant turn, the target the rest, trained on the assistant
  // turns only (SftBatch.Pair.trained).
  [[nodiscard]] absl::StatusOr<v1::SftBatch::Pair> MakeSftPair(const data::Example& example) const;

  // The example's chat: nullopt for a plain example (no "messages"). Fails
  // when the model has no chat template or the messages do not parse.
  [[nodiscard]] absl::StatusOr<std::optional<ExampleChat>> ChatOf(
      const data::Example& example) const;

 private:
  std::unique_ptr<text::Tokenizer> tokenizer_;
  // Or why the model has none.
  absl::StatusOr<chat::ChatTemplate> chat_template_;
};

}  // namespace trellis::loop

#endif  // TRELLIS_LOOP_PROMPT_FORMAT_H_
