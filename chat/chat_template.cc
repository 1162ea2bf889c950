#include "chat/chat_template.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"

namespace trellis::chat {
namespace {

constexpr const char* kSpecialTokens[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                          "pad_token", "cls_token", "mask_token"};

absl::Status Prefixed(const std::string& source, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(source, ": ", status.message()));
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::FromTokenizerConfig(const std::string& dir, env::Env* env) {
  const std::string config_path = dir + "/tokenizer_config.json";
  absl::StatusOr<std::string> text = env->ReadFile(config_path);
  if (!text.ok()) return Prefixed(config_path, text.status());
  Json config = Json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) return absl::InvalidArgumentError(absl::StrCat(config_path, ": not a JSON object"));

  std::map<std::string, std::string> special;
  for (const char* key : kSpecialTokens) {
    auto it = config.find(key);
    if (it == config.end() || it->is_null()) continue;
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
      special[key] = (*it)["content"].get<std::string>();
    } else if (it->is_string()) {
      special[key] = it->get<std::string>();
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(config_path, ": ", key, " must be a string or {\"content\": string}"));
    }
  }

  std::map<std::string, std::string> templates;
  std::string source = config_path;
  const std::string jinja_path = dir + "/chat_template.jinja";
  if (env->Exists(jinja_path)) {
    absl::StatusOr<std::string> jinja = env->ReadFile(jinja_path);
    if (!jinja.ok()) return Prefixed(jinja_path, jinja.status());
    templates["default"] = *std::move(jinja);
    source = jinja_path;
  } else if (auto it = config.find("chat_template"); it != config.end() && it->is_string()) {
    templates["default"] = it->get<std::string>();
  } else if (it != config.end() && it->is_array()) {
    for (size_t i = 0; i < it->size(); ++i) {
      const Json& entry = (*it)[i];
      if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
          !entry.contains("template") || !entry["template"].is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            config_path, ": chat_template[", i, "] must be {\"name\": string, \"template\": string}"));
      }
      templates[entry["name"].get<std::string>()] = entry["template"].get<std::string>();
    }
  } else {
    return absl::NotFoundError(absl::StrCat(
        dir, " has no chat template (neither chat_template in tokenizer_config.json nor chat_template.jinja)"));
  }
  return Create(templates, std::move(special), source, env);
}

absl::StatusOr<ChatTemplate> ChatTemplate::Create(const std::map<std::string, std::string>& templates,
                                                  std::map<std::string, std::string> special_tokens,
                                                  const std::string& source, env::Env* env) {
  ChatTemplate chat;
  for (const auto& [name, text] : templates) {
    absl::StatusOr<jinja::Template> parsed = jinja::Template::Parse(text, jinja::LexOptions{true, true});
    if (!parsed.ok()) return Prefixed(absl::StrCat(source, " template '", name, "'"), parsed.status());
    chat.templates_.emplace(name, *std::move(parsed));
  }
  chat.special_tokens_ = std::move(special_tokens);
  chat.source_ = source;
  chat.env_ = env;
  return chat;
}

absl::StatusOr<const jinja::Template*> ChatTemplate::Select(const Json& tools) const {
  auto it = templates_.end();
  if (!tools.is_null()) it = templates_.find("tool_use");
  if (it == templates_.end()) it = templates_.find("default");
  if (it != templates_.end()) return &it->second;
  std::vector<std::string> names;
  for (const auto& entry : templates_) names.push_back(entry.first);
  return absl::InvalidArgumentError(absl::StrCat(source_, ": no template named 'default' among ",
                                                 absl::StrJoin(names, ", ")));
}

absl::StatusOr<std::string> ChatTemplate::Render(const std::vector<Message>& messages, const Json& tools,
                                                 bool add_generation_prompt) const {
  absl::StatusOr<const jinja::Template*> selected = Select(tools);
  if (!selected.ok()) return selected.status();
  if (!tools.is_null() && !tools.is_array()) {
    return absl::InvalidArgumentError("tools: must be a list of JSON schemas or null");
  }
  std::map<std::string, jinja::Value> vars;
  for (const auto& [key, token] : special_tokens_) vars[key] = Json(token);
  Json data = Json::array();
  for (const Message& m : messages) data.push_back(MessageToTemplateData(m));
  vars["messages"] = std::move(data);
  vars["tools"] = tools;
  vars["documents"] = Json();
  vars["add_generation_prompt"] = Json(add_generation_prompt);
  vars["raise_exception"] = jinja::MakeFunction([](const jinja::CallArgs& args) -> absl::StatusOr<jinja::Value> {
    const std::string message = args.positional.empty() ? "" : jinja::ToPrintString(args.positional[0]);
    return absl::InvalidArgumentError(absl::StrCat("the template raised an exception: ", message));
  });
  env::Env* env = env_;
  vars["strftime_now"] = jinja::MakeFunction([env](const jinja::CallArgs& args) -> absl::StatusOr<jinja::Value> {
    if (args.positional.size() != 1 || !args.positional[0].is_string()) {
      return absl::InvalidArgumentError("strftime_now takes one format string");
    }
    return jinja::Value(Json(absl::FormatTime(args.positional[0].json().get<std::string>(), env->Now(),
                                              absl::LocalTimeZone())));
  });
  absl::StatusOr<std::string> out = (*selected)->Render(vars);
  if (!out.ok()) return Prefixed(source_, out.status());
  return out;
}

absl::StatusOr<std::vector<Segment>> ChatTemplate::RenderTurns(const std::vector<Message>& messages,
                                                               const Json& tools) const {
  absl::StatusOr<std::string> full = Render(messages, tools, false);
  if (!full.ok()) return full.status();
  std::vector<Segment> segments;
  size_t done = 0;
  auto refuse = [&](size_t i, absl::string_view what) {
    return absl::FailedPreconditionError(absl::StrCat(
        source_, ": cannot mark messages[", i, "] (assistant): ", what,
        " is not how the whole conversation starts, so the template renders earlier turns "
        "differently once later ones follow"));
  };
  for (size_t i = 0; i < messages.size(); ++i) {
    if (!messages[i].is_assistant()) continue;
    const std::vector<Message> before_msgs(messages.begin(), messages.begin() + static_cast<long>(i));
    const std::vector<Message> after_msgs(messages.begin(), messages.begin() + static_cast<long>(i) + 1);
    absl::StatusOr<std::string> before = Render(before_msgs, tools, true);
    if (!before.ok()) return before.status();
    absl::StatusOr<std::string> after = Render(after_msgs, tools, false);
    if (!after.ok()) return after.status();
    if (!absl::StartsWith(*full, *before) || before->size() < done) {
      return refuse(i, "the conversation before it with the generation prompt");
    }
    if (!absl::StartsWith(*full, *after) || after->size() < before->size()) {
      return refuse(i, "the conversation up to it");
    }
    if (before->size() > done) segments.push_back({SegmentKind::kPrompt, full->substr(done, before->size() - done)});
    if (after->size() > before->size()) {
      segments.push_back({SegmentKind::kAssistant, full->substr(before->size(), after->size() - before->size())});
    }
    done = after->size();
  }
  if (full->size() > done) segments.push_back({SegmentKind::kPrompt, full->substr(done)});
  return segments;
}

absl::StatusOr<std::string> ChatTemplate::Continue(const std::string& so_far,
                                                   const std::vector<Message>& messages,
                                                   const Json& tools) const {
  absl::StatusOr<std::string> rendered = Render(messages, tools, true);
  if (!rendered.ok()) return rendered.status();
  if (absl::StartsWith(*rendered, so_far)) return rendered->substr(so_far.size());
  size_t part = 0;
  while (part < so_far.size() && part < rendered->size() && so_far[part] == (*rendered)[part]) {
    ++part;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      source_, ": cannot continue the conversation token-exactly: rendered with its ",
      messages.size(), " messages, it does not start with the text so far (they part at byte ",
      part, ": \"", absl::CHexEscape(so_far.substr(part, 40)), "\" against \"",
      absl::CHexEscape(rendered->substr(part, 40)),
      "\"), so the template renders earlier turns differently once later ones follow"));
}

}  // namespace trellis::chat
