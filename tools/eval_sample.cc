// `trellis report`'s sample of the last evaluation's answers
// (tools/answer_commands.h).

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "config/printable.h"
#include "env/env.h"
#include "env/run_dir.h"
#include "loop/eval_answers.h"
#include "nlohmann/json.hpp"
#include "tools/answer_commands.h"

namespace trellis::tools {
namespace {

using config::Printable;

// Bytes of a prompt, response or answer shown.
constexpr size_t kShown = 160;

// The string `field` of `item`, "" when it has none.
std::string Text(const nlohmann::json& item, const char* field) {
  const auto it = item.find(field);
  return it != item.end() && it->is_string() ? it->get<std::string>() : "";
}

// The end of `s`: its last kShown bytes (from a character's start), after "...".
std::string Tail(const std::string& s) {
  if (s.size() <= kShown) return Printable(s);
  size_t start = s.size() - kShown;
  while (start < s.size() && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) ++start;
  return "..." + Printable(s.substr(start));
}

// Whether `item` says it was scored (false when it does not say).
bool Scored(const nlohmann::json& item) {
  const auto it = item.find("scored");
  return it != item.end() && it->is_boolean() && it->get<bool>();
}

std::string Item(const nlohmann::json& item) {
  const bool scored = Scored(item);
  const nlohmann::json reward = item.value("reward", nlohmann::json());
  std::string out = absl::StrFormat(
      "  #%s  prompt %s  %s  reward %s%s\n", item.value("index", nlohmann::json()).dump(),
      item.value("prompt_id", nlohmann::json()).dump(), Printable(Text(item, "verdict"), 40),
      reward.dump(),
      scored ? "" : absl::StrCat("  NOT SCORED (", Printable(Text(item, "failure"), 40), ")"));
  absl::StrAppend(&out, "      prompt:   \"", Tail(Text(item, "prompt")), "\"\n");
  absl::StrAppend(&out, "      response: \"", Printable(Text(item, "response"), kShown), "\"\n");
  absl::StrAppend(&out, "      answer:   \"", Printable(Text(item, "answer"), kShown), "\"\n");
  return out;
}

}  // namespace

std::string EvalSample(const std::string& run_dir, int items) {
  env::Env* env = env::Env::Default();
  absl::StatusOr<std::vector<std::string>> labels = loop::EvalLabels(env, run_dir);
  if (!labels.ok()) return absl::StrCat("answers: ", Printable(labels.status().ToString()), "\n");
  if (labels->empty()) return "";
  const std::string path = env::RunDir(run_dir).EvalAnswers(labels->back());
  absl::StatusOr<std::string> text = env->ReadFile(path);
  if (!text.ok()) return absl::StrCat("answers: ", Printable(text.status().ToString()), "\n");
  std::vector<nlohmann::json> shown;
  int64_t total = 0;
  int64_t unscored = 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    ++total;
    nlohmann::json item = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!item.is_object()) {
      return absl::StrCat("answers: ", Printable(path), " line ", total, ": not a JSON object\n");
    }
    unscored += !Scored(item);
    if (static_cast<int64_t>(shown.size()) < items) shown.push_back(std::move(item));
  }
  std::string out =
      absl::StrFormat("evaluation %s: %d items, %d not scored (%s); the first %d:\n",
                      Printable(labels->back()), total, unscored, Printable(path), shown.size());
  for (const nlohmann::json& item : shown) absl::StrAppend(&out, Item(item));
  return out;
}

}  // namespace trellis::tools
