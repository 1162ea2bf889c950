// `trellis tokenize` and `trellis chat` (tools/answer_commands.h).

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chat/chat_template.h"
#include "chat/message.h"
#include "config/job_config.h"
#include "config/printable.h"
#include "env/env.h"
#include "env/run_dir.h"
#include "text/hf_tokenizer.h"
#include "text/tokenizer.h"
#include "tools/answer_commands.h"

namespace trellis::tools {
namespace {

using config::Printable;

// The model directory `target` names: a job's model.path (a run
// directory's job.yaml, or the job file itself), or the directory itself.
// "" for a job's built-in model.
absl::StatusOr<std::string> ModelDir(const std::string& target) {
  env::Env* env = env::Env::Default();
  const std::string run_job = env::RunDir(target).JobYaml();
  const bool model_dir = env->ListDir(target).ok() && !env->Exists(run_job);
  if (model_dir) return target;
  absl::StatusOr<v1::JobConfig> job = config::LoadJobFile(env->Exists(run_job) ? run_job : target);
  if (!job.ok()) return job.status();
  return job->model().path();
}

absl::StatusOr<std::unique_ptr<text::Tokenizer>> TokenizerOf(const std::string& target) {
  absl::StatusOr<std::string> dir = ModelDir(target);
  if (!dir.ok()) return dir.status();
  if (dir->empty()) return text::NewCharTokenizer();
  return text::LoadHfTokenizer(*dir);
}

absl::StatusOr<chat::ChatTemplate> ChatTemplateOf(const std::string& target) {
  absl::StatusOr<std::string> dir = ModelDir(target);
  if (!dir.ok()) return dir.status();
  if (dir->empty()) {
    return absl::NotFoundError("the job's own model (no model.path) has no chat template");
  }
  return chat::ChatTemplate::FromTokenizerConfig(*dir);
}

// The ids of `text`, on one line or (pieces) one token a line.
absl::StatusOr<std::string> Tokenize(const std::string& target, const std::string& text,
                                     bool pieces) {
  absl::StatusOr<std::unique_ptr<text::Tokenizer>> tokenizer = TokenizerOf(target);
  if (!tokenizer.ok()) return tokenizer.status();
  absl::StatusOr<std::vector<int32_t>> ids = (*tokenizer)->Encode(text);
  if (!ids.ok()) return ids.status();
  if (!pieces) return absl::StrCat(absl::StrJoin(*ids, " "), "\n");
  std::string out;
  for (int32_t id : *ids) {
    absl::StrAppend(&out, id, "\t\"", Printable((*tokenizer)->Decode({id})), "\"\n");
  }
  return out;
}

// The conversation of `file` rendered.
absl::StatusOr<std::string> RenderChat(const std::string& target, const std::string& file,
                                       bool generation_prompt) {
  absl::StatusOr<std::string> text = env::Env::Default()->ReadFile(file);
  if (!text.ok()) return text.status();
  const chat::Json json = chat::Json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": not JSON"));
  }
  const bool object = json.is_object();
  if (!object && !json.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ": expected a list of messages or an object with \"messages\" (and \"tools\")"));
  }
  absl::StatusOr<std::vector<chat::Message>> messages =
      chat::ParseMessages(object ? json.value("messages", chat::Json()) : json);
  if (!messages.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", messages.status().message()));
  }
  absl::StatusOr<chat::ChatTemplate> chat_template = ChatTemplateOf(target);
  if (!chat_template.ok()) return chat_template.status();
  return chat_template->Render(*messages, object ? json.value("tools", chat::Json()) : chat::Json(),
                               generation_prompt);
}

// Removes `name` from args; true if it was there.
bool TakeSwitch(std::vector<std::string>& args, const std::string& name) {
  const auto it = std::find(args.begin(), args.end(), name);
  if (it == args.end()) return false;
  args.erase(it);
  return true;
}

}  // namespace

int TextCommand(const std::string& command, const std::vector<std::string>& given,
                std::ostream& out, std::ostream& err) {
  std::vector<std::string> args = given;
  const bool tokenize = command == "tokenize";
  const std::string flag = tokenize ? "--pieces" : "--generation-prompt";
  const bool on = TakeSwitch(args, flag);
  const bool unknown_flag = std::any_of(args.begin(), args.end(), [](const std::string& a) {
    return a.size() > 2 && a.rfind("--", 0) == 0;
  });
  if (args.size() != 2 || unknown_flag) {
    err << "trellis " << command << ": expected JOB_OR_MODEL_DIR "
        << (tokenize ? "TEXT" : "CONVERSATION.json") << " [" << flag << "]\n";
    return 2;
  }
  absl::StatusOr<std::string> result =
      tokenize ? Tokenize(args[0], args[1], on) : RenderChat(args[0], args[1], on);
  if (!result.ok()) {
    err << "trellis " << command << ": " << Printable(result.status().ToString()) << "\n";
    return 1;
  }
  out << (tokenize ? *result : Printable(*result, 0, "\n\t"));
  return 0;
}

}  // namespace trellis::tools
