// python_tool: the policy runs Python in the code sandbox and ends with an
// answer. An action holding "<py>" is code: the text after its last "<py>"
// up to the next "</py>" (or the action's end) runs as a program
// (plugin/sandbox.h, no input) and the observation is its stdout, cut to
// max_output bytes, then the last line of its stderr when it failed; code
// that runs past the call's deadline fails the call (DeadlineExceeded,
// failure reason "deadline"). An action without "<py>"
// is the final answer: a verifier (answer_verifier, default "math")
// compares it with the item's answer; reward 1 when CORRECT, done.

#include <sys/wait.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "environment/internal/episodes.h"
#include "environment/internal/options.h"
#include "environment/internal/register.h"
#include "plugin/sandbox.h"
#include "verifier/verifier.h"

namespace trellis::environment::internal {
namespace {

constexpr char kOpen[] = "<py>";
constexpr char kClose[] = "</py>";

struct ToolEpisode {
  std::string prompt;
  std::string answer;
  std::string metadata_json;
  bool done = false;
};

struct Settings {
  plugin::SandboxMode mode = plugin::SandboxMode::kBwrap;
  plugin::SandboxLimits limits;
  std::string interpreter = "python3";
  size_t max_output = 256;
  absl::Duration deadline;
  int workers = 1;
};

std::string LastLine(absl::string_view s) {
  std::vector<absl::string_view> lines = absl::StrSplit(s, '\n', absl::SkipWhitespace());
  return lines.empty() ? "" : std::string(lines.back());
}

class PythonTool : public Environment {
 public:
  PythonTool(Settings settings, std::unique_ptr<verifier::Verifier> judge)
      : settings_(std::move(settings)), judge_(std::move(judge)) {}

  absl::StatusOr<v1::OpenEpisodeResponse> Open(const v1::OpenEpisodeRequest& request) override {
    if (absl::Status s = episodes_.Add(request.episode_id(), {request.prompt(), request.answer(),
                                                              request.metadata_json(), false});
        !s.ok()) {
      return s;
    }
    v1::OpenEpisodeResponse r;
    v1::EnvironmentTool* tool = r.add_tools();
    tool->set_name("python");
    tool->set_description(
        absl::StrCat("Runs the code between ", kOpen, " and ", kClose, "; shows its output."));
    return r;
  }

  absl::StatusOr<v1::EnvironmentStepResponse> Step(
      const v1::EnvironmentStepRequest& request) override {
    absl::StatusOr<ToolEpisode> e = episodes_.Running(request.episode_id());
    if (!e.ok()) return e.status();
    const std::string& action = request.action();
    const size_t open = action.rfind(kOpen);
    if (open == std::string::npos) return Answer(request.episode_id(), *std::move(e), action);
    const size_t start = open + sizeof(kOpen) - 1;
    const size_t close = action.find(kClose, start);
    return Run(
        action.substr(start, close == std::string::npos ? std::string::npos : close - start));
  }

  absl::Status Close(const v1::CloseEpisodeRequest& request) override {
    episodes_.Remove(request.episode_id());
    return absl::OkStatus();
  }

  int MaxConcurrency() const override { return settings_.workers; }

 private:
  absl::StatusOr<v1::EnvironmentStepResponse> Run(const std::string& program) const {
    absl::StatusOr<plugin::SandboxRun> run =
        plugin::RunSandboxed(settings_.mode, settings_.interpreter, program, "", settings_.limits,
                             absl::Now() + settings_.deadline);
    if (!run.ok()) {
      return absl::InternalError(absl::StrCat("python_tool sandbox: ", run.status().message()));
    }
    // The pool's deadline (environment/pool.cc) is the same; whichever of
    // the two sees it first, the call fails as late.
    if (run->timed_out) {
      return absl::DeadlineExceededError(absl::StrCat(
          "python_tool: the code ran past the call's deadline (",
          absl::FormatDuration(settings_.deadline), ")"));
    }
    std::string out = run->out.substr(0, settings_.max_output);
    const bool clean = WIFEXITED(run->wait_status) && WEXITSTATUS(run->wait_status) == 0;
    if (!clean) {
      absl::StrAppend(&out, LastLine(run->err).substr(0, settings_.max_output));
    }
    v1::EnvironmentStepResponse r;
    r.set_observation(std::move(out));
    return r;
  }

  absl::StatusOr<v1::EnvironmentStepResponse> Answer(const std::string& id, ToolEpisode e,
                                                     const std::string& action) {
    v1::VerifyItem item;
    item.set_prompt(e.prompt);
    item.set_response(action);
    item.set_answer(e.answer);
    item.set_metadata_json(e.metadata_json);
    const v1::VerifyResult verdict = judge_->Verify(item);
    e.done = true;
    episodes_.Put(id, std::move(e));
    v1::EnvironmentStepResponse r;
    r.set_reward(verdict.verdict() == v1::CORRECT ? 1 : 0);
    r.set_done(true);
    r.set_metadata_json(
        absl::StrCat("{\"verdict\": \"", v1::Verdict_Name(verdict.verdict()), "\"}"));
    return r;
  }

  const Settings settings_;
  const std::unique_ptr<verifier::Verifier> judge_;
  Episodes<ToolEpisode> episodes_;
};

absl::StatusOr<plugin::SandboxChoice> ParseChoice(const std::string& name) {
  if (name == "auto") return plugin::SandboxChoice::kAuto;
  if (name == "bwrap") return plugin::SandboxChoice::kBwrap;
  if (name == "rlimits") return plugin::SandboxChoice::kRlimits;
  return absl::InvalidArgumentError(absl::StrCat(
      "environment.options_json.sandbox: expected auto, bwrap or rlimits, found \"", name, "\""));
}

absl::StatusOr<std::unique_ptr<Environment>> MakePythonTool(const v1::EnvironmentConfig& c) {
  absl::StatusOr<Options> o = Options::Parse(
      c, {"sandbox", "interpreter", "cpu_seconds", "memory_mb", "max_output", "answer_verifier"});
  if (!o.ok()) return o.status();
  std::string sandbox = "auto";
  std::string judge_name = "math";
  Settings s;
  int64_t cpu_seconds = s.limits.cpu_seconds;
  int64_t memory_mb = s.limits.memory_bytes >> 20;
  int64_t max_output = static_cast<int64_t>(s.max_output);
  for (absl::Status st :
       {o->Get("sandbox", &sandbox), o->Get("interpreter", &s.interpreter),
        o->Get("cpu_seconds", &cpu_seconds), o->Get("memory_mb", &memory_mb),
        o->Get("max_output", &max_output), o->Get("answer_verifier", &judge_name)}) {
    if (!st.ok()) return st;
  }
  if (cpu_seconds < 1 || memory_mb < 16 || max_output < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "environment.options_json: python_tool needs cpu_seconds >= 1, memory_mb >= 16 and "
        "max_output >= 0, found ",
        cpu_seconds, ", ", memory_mb, ", ", max_output));
  }
  s.limits.cpu_seconds = static_cast<int>(cpu_seconds);
  s.limits.memory_bytes = memory_mb << 20;
  s.max_output = static_cast<size_t>(max_output);
  s.deadline = absl::Milliseconds(c.call_deadline_ms());
  s.workers = c.workers();
  absl::StatusOr<plugin::SandboxChoice> choice = ParseChoice(sandbox);
  if (!choice.ok()) return choice.status();
  absl::StatusOr<plugin::SandboxMode> mode =
      plugin::ChooseSandbox(*choice, "environment python_tool", "environment.options_json.sandbox",
                            "docs/environment-protocol.md");
  if (!mode.ok()) return mode.status();
  s.mode = *mode;
  verifier::VerifierRegistry verifiers;
  if (absl::Status st = verifier::RegisterBuiltinVerifiers(verifiers); !st.ok()) return st;
  v1::VerifierConfig vc;
  vc.set_name(judge_name);
  absl::StatusOr<std::unique_ptr<verifier::Verifier>> judge = verifiers.Create(vc);
  if (!judge.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment.options_json.answer_verifier: ", judge.status().message()));
  }
  return std::make_unique<PythonTool>(std::move(s), *std::move(judge));
}

}  // namespace

absl::Status RegisterPythonTool(EnvironmentRegistry& registry) {
  return registry.Register("python_tool", MakePythonTool);
}

}  // namespace trellis::environment::internal
