#include "loop/prompt_format.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "loop/loop_util.h"
#include "text/hf_tokenizer.h"

namespace trellis::loop {
namespace {

// The example's "min_new_tokens" field (data/README: a response that may
// not end sooner), 0 when it has none.
absl::StatusOr<int32_t> MinNewTokens(const data::Example& example) {
  const nlohmann::json fields = nlohmann::json::parse(example.metadata_json, nullptr, false);
  if (!fields.is_object() || !fields.contains("min_new_tokens")) return 0;
  const nlohmann::json& value = fields.at("min_new_tokens");
  if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
      value.get<int64_t>() > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_new_tokens must be an integer >= 0, found ", value.dump()));
  }
  return static_cast<int32_t>(value.get<int64_t>());
}

}  // namespace
absl::StatusOr<std::unique_ptr<PromptFormat>> PromptFormat::ForJob(const v1::JobConfig& job) {
  const std::string& dir = job.model().path();
  if (dir.empty()) {
    return std::make_unique<PromptFormat>(
        text::NewCharTokenizer(),
        absl::NotFoundError("the job's own model (no model.path) has no chat template"));
  }
  absl::StatusOr<std::unique_ptr<text::Tokenizer>> tokenizer = text::LoadHfTokenizer(dir);
  if (!tokenizer.ok()) return At(tokenizer.status(), "model.path");
  absl::StatusOr<chat::ChatTemplate> chat = chat::ChatTemplate::FromTokenizerConfig(dir);
  if (!chat.ok() && chat.status().code() != absl::StatusCode::kNotFound) {
    return At(chat.status(), "model.path");
  }
  return std::make_unique<PromptFormat>(*std::move(tokenizer), std::move(chat));
}

PromptFormat::PromptFormat(std::unique_ptr<text::Tokenizer> tokenizer,
                           absl::StatusOr<chat::ChatTemplate> chat_template)
    : tokenizer_(std::move(tokenizer)), chat_template_(std::move(chat_template)) {}

absl::StatusOr<std::optional<ExampleChat>> PromptFormat::ChatOf(
    const data::Example& example) const {
  if (example.messages_json.empty()) return std::nullopt;
  if (!chat_template_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "example ", example.id, " holds messages, but ", chat_template_.status().message()));
  }
  const chat::Json messages = chat::Json::parse(example.messages_json, nullptr, false);
  absl::StatusOr<std::vector<chat::Message>> parsed = chat::ParseMessages(messages);
  if (!parsed.ok()) return parsed.status();
  ExampleChat chat{&*chat_template_, *std::move(parsed), nullptr};
  const chat::Json metadata = chat::Json::parse(example.metadata_json, nullptr, false);
  if (metadata.is_object() && metadata.contains("tools")) chat.tools = metadata["tools"];
  return chat;
}

absl::StatusOr<v1::Prompt> PromptFormat::MakePrompt(const data::Example& example) const {
  const std::string where = absl::StrCat("prompt ", example.id);
  v1::Prompt prompt;
  prompt.set_id(example.id);
  prompt.set_answer(example.answer);
  std::string text = example.prompt;
  absl::StatusOr<std::optional<ExampleChat>> chat = ChatOf(example);
  if (!chat.ok()) return At(chat.status(), where);
  if (chat->has_value()) {
    const ExampleChat& parsed = **chat;
    absl::StatusOr<std::string> rendered =
        parsed.chat_template->Render(parsed.messages, parsed.tools, /*add_generation_prompt=*/true);
    if (!rendered.ok()) return At(rendered.status(), where);
    text = *std::move(rendered);
  } else if (std::optional<int32_t> bos = tokenizer_->bos_id(); bos.has_value()) {
    prompt.add_token_ids(*bos);  // a chat template writes its own
  }
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer_->Encode(text);
  if (!ids.ok()) return At(ids.status(), where);
  prompt.mutable_token_ids()->Add(ids->begin(), ids->end());
  prompt.set_text(std::move(text));
  absl::StatusOr<int32_t> min_new = MinNewTokens(example);
  if (!min_new.ok()) return At(min_new.status(), where);
  prompt.set_min_new_tokens(*min_new);
  return prompt;
}

absl::StatusOr<std::vector<int32_t>> PromptFormat::ResponseTokens(const std::string& text,
                                                                  const std::string& what) const {
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer_->Encode(text);
  if (!ids.ok()) return At(ids.status(), what);
  ids->push_back(tokenizer_->eos_id());
  return ids;
}

absl::StatusOr<v1::SftBatch::Pair> PromptFormat::MakeSftPair(const data::Example& example) const {
  v1::SftBatch::Pair pair;
  if (example.messages_json.empty()) {
    absl::StatusOr<v1::Prompt> prompt = MakePrompt(example);
    if (!prompt.ok()) return prompt.status();
    absl::StatusOr<std::vector<int32_t>> target =
        ResponseTokens(example.answer, absl::StrCat("answer of example ", example.id));
    if (!target.ok()) return target.status();
    *pair.mutable_prompt_tokens() = prompt->token_ids();
    pair.mutable_target_tokens()->Add(target->begin(), target->end());
    return pair;
  }
  const std::string where = absl::StrCat("example ", example.id);
  absl::StatusOr<std::optional<ExampleChat>> chat = ChatOf(example);
  if (!chat.ok()) return At(chat.status(), where);
  ExampleChat* parsed = &**chat;
  if (!example.answer.empty()) {
    chat::Message answer;
    answer.role = "assistant";
    answer.content = example.answer;
    parsed->messages.push_back(std::move(answer));
  }
  absl::StatusOr<std::vector<chat::Segment>> turns =
      parsed->chat_template->RenderTurns(parsed->messages, parsed->tools);
  if (!turns.ok()) return At(turns.status(), where);
  bool in_target = false;
  for (const chat::Segment& segment : *turns) {
    const bool assistant = segment.kind == chat::SegmentKind::kAssistant;
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer_->Encode(segment.text);
    if (!ids.ok()) return At(ids.status(), where);
    in_target = in_target || assistant;
    if (!in_target) {
      pair.mutable_prompt_tokens()->Add(ids->begin(), ids->end());
      continue;
    }
    pair.mutable_target_tokens()->Add(ids->begin(), ids->end());
    for (size_t i = 0; i < ids->size(); ++i) pair.add_trained(assistant);
  }
  if (!in_target) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": a supervised chat needs an assistant turn or an answer"));
  }
  if (pair.prompt_tokens().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": the chat template renders nothing before the first assistant turn"));
  }
  if (std::all_of(pair.trained().begin(), pair.trained().end(), [](bool t) { return t; })) {
    pair.clear_trained();  // every target token is trained
  }
  return pair;
}

}  // namespace trellis::loop
