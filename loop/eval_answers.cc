#include "loop/eval_answers.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "env/confined_path.h"
#include "env/run_dir.h"
#include "nlohmann/json.hpp"

namespace trellis::loop {
namespace {

constexpr char kSuffix[] = ".jsonl";

// Where `label` falls in the run: before first, the steps by number, after last.
std::pair<int, int64_t> RunOrder(const std::string& label) {
  int64_t step = 0;
  if (label == "before") return {0, 0};
  if (absl::StartsWith(label, "step_") && absl::SimpleAtoi(label.substr(5), &step)) {
    return {1, step};
  }
  return {label == "after" ? 2 : 3, 0};
}

}  // namespace

bool Scored(const v1::VerifyResult& result) {
  return result.verdict() != v1::ERROR && result.verdict() != v1::TIMEOUT;
}

std::string EvalAnswerLine(const std::string& label, int64_t index, const EvalAnswer& answer) {
  nlohmann::ordered_json line;
  line["eval"] = label;
  line["index"] = index;
  line["prompt_id"] = answer.prompt_id;
  line["prompt"] = answer.prompt;
  line["response"] = answer.response;
  line["answer"] = answer.answer;
  line["verdict"] = absl::AsciiStrToLower(v1::Verdict_Name(answer.result.verdict()));
  line["reward"] = answer.result.reward();
  line["scored"] = Scored(answer.result);
  if (!Scored(answer.result)) {
    line["failure"] =
        absl::AsciiStrToLower(v1::VerifyResult::Failure_Name(answer.result.failure()));
  }
  if (!answer.result.detail().empty()) line["detail"] = answer.result.detail();
  // A model's text need not be valid UTF-8 (a byte token cut short):
  // such bytes are written as U+FFFD.
  return line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

absl::Status WriteEvalAnswers(env::Env* env, const std::string& run_dir, const std::string& label,
                              const std::vector<EvalAnswer>& answers) {
  absl::StatusOr<std::string> dir = env::ConfinedPath(run_dir, env::RunDir::kEval);
  if (!dir.ok()) return dir.status();
  absl::StatusOr<std::string> path =
      env::ConfinedPath(run_dir, absl::StrCat(env::RunDir::kEval, "/", label, kSuffix));
  if (!path.ok()) return path.status();
  if (absl::Status s = env->CreateDir(*dir); !s.ok()) return s;
  std::string contents;
  for (size_t i = 0; i < answers.size(); ++i) {
    absl::StrAppend(&contents, EvalAnswerLine(label, static_cast<int64_t>(i), answers[i]), "\n");
  }
  return env->WriteFileAtomically(*path, contents);
}

absl::StatusOr<std::vector<std::string>> EvalLabels(env::Env* env, const std::string& run_dir) {
  const std::string dir = env::RunDir(run_dir).File(env::RunDir::kEval);
  if (!env->Exists(dir)) return std::vector<std::string>();
  absl::StatusOr<std::vector<std::string>> names = env->ListDir(dir);
  if (!names.ok()) return names.status();
  std::vector<std::string> labels;
  for (const std::string& name : *names) {
    if (absl::EndsWith(name, kSuffix))
      labels.push_back(name.substr(0, name.size() - (sizeof(kSuffix) - 1)));
  }
  std::stable_sort(labels.begin(), labels.end(), [](const std::string& a, const std::string& b) {
    return RunOrder(a) < RunOrder(b);
  });
  return labels;
}

}  // namespace trellis::loop
