// code_exec: runs the response (a Python program, or the last ```python
// fenced block in it) against test cases [{"input": str, "output": str}]
// given as the answer, each in a sandbox (internal/sandbox.h). The first
// failing test decides the verdict; its detail starts with what happened:
// "timeout", "cpu_limit", "memory_limit", "process_limit",
// "network_blocked", "syscall_denied", "write_denied", "file_size_limit",
// "runtime_error" or "wrong_output".

#include <signal.h>
#include <sys/wait.h>

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"
#include "plugin/process.h"
#include "plugin/sandbox.h"
#include "verifier/internal/register.h"
#include "verifier/internal/result.h"

namespace trellis::verifier::internal {
namespace {

using plugin::Child;
using plugin::RunSandboxed;
using plugin::SandboxLimits;
using plugin::SandboxMode;
using plugin::SandboxRun;

struct TestCase {
  std::string input;
  std::string output;
};

// The last ```python (or ```) fenced block, else the whole response.
std::string ExtractProgram(const std::string& response) {
  size_t open = response.rfind("```python");
  size_t skip = 9;
  if (open == std::string::npos) {
    open = response.find("```");
    skip = 3;
  }
  if (open == std::string::npos) return response;
  const size_t start = open + skip;
  const size_t close = response.find("```", start);
  if (close == std::string::npos) return response.substr(start);
  return response.substr(start, close - start);
}

// Trailing whitespace of each line and trailing blank lines ignored.
std::string Normalize(absl::string_view s) {
  std::string out;
  for (absl::string_view line : absl::StrSplit(s, '\n')) {
    absl::StrAppend(&out, absl::StripTrailingAsciiWhitespace(line), "\n");
  }
  while (absl::EndsWith(out, "\n\n")) out.pop_back();
  if (out == "\n") out.clear();
  return out;
}

std::string LastLine(absl::string_view s) {
  std::vector<absl::string_view> lines = absl::StrSplit(s, '\n', absl::SkipWhitespace());
  return lines.empty() ? "" : std::string(lines.back());
}

// What stopped a failed run, by its signal and the interpreter's message.
std::string Classify(const SandboxRun& run) {
  const int st = run.wait_status;
  const int sig = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
  const std::string& e = run.err;
  if (sig == SIGXCPU) return "cpu_limit";
  if (sig == SIGXFSZ || absl::StrContains(e, "File too large")) return "file_size_limit";
  if (absl::StrContains(e, "MemoryError") || absl::StrContains(e, "Cannot allocate memory")) {
    return "memory_limit";
  }
  if (absl::StrContains(e, "BlockingIOError") ||
      absl::StrContains(e, "Resource temporarily unavailable")) {
    return "process_limit";
  }
  for (const char* net : {"Network is unreachable", "Temporary failure in name resolution",
                          "Name or service not known", "Cannot assign requested address",
                          "Connection refused", "Address family not supported"}) {
    if (absl::StrContains(e, net)) return "network_blocked";
  }
  if (absl::StrContains(e, "Operation not permitted")) return "syscall_denied";  // seccomp
  if (absl::StrContains(e, "Read-only file system") || absl::StrContains(e, "PermissionError")) {
    return "write_denied";
  }
  if (sig == SIGKILL || sig == SIGSEGV) return "memory_limit";  // RLIMIT_AS, most likely
  return "runtime_error";
}

class CodeExec : public Verifier {
 public:
  CodeExec(const v1::VerifierConfig& c, SandboxMode mode) : config_(c), mode_(mode) {
    limits_.cpu_seconds = c.cpu_seconds();
    limits_.memory_bytes = int64_t{c.memory_mb()} << 20;
    limits_.max_processes = c.max_processes();
    limits_.max_file_bytes = int64_t{c.max_file_mb()} << 20;
  }

  v1::VerifyResult Verify(const v1::VerifyItem& item) const override {
    std::vector<TestCase> tests;
    const nlohmann::json j = nlohmann::json::parse(item.answer(), nullptr, false);
    if (j.is_discarded() || !j.is_array()) {
      return Result(v1::ERROR, config_.reward_wrong(),
                    "answer: expected a JSON array of {\"input\": str, \"output\": str}");
    }
    for (const auto& t : j) {
      if (!t.is_object() || !t.contains("input") || !t["input"].is_string() ||
          !t.contains("output") || !t["output"].is_string()) {
        return Result(v1::ERROR, config_.reward_wrong(),
                      absl::StrCat("answer: test ", tests.size() + 1,
                                   " must be {\"input\": str, \"output\": str}"));
      }
      tests.push_back({t["input"].get<std::string>(), t["output"].get<std::string>()});
    }
    const std::string program = ExtractProgram(item.response());
    const absl::Time deadline = absl::Now() + absl::Milliseconds(config_.deadline_ms());
    for (size_t i = 0; i < tests.size(); ++i) {
      const std::string where = absl::StrCat("test ", i + 1, "/", tests.size());
      absl::StatusOr<SandboxRun> run = RunSandboxed(mode_, config_.interpreter(), program,
                                                    tests[i].input, limits_, deadline);
      if (!run.ok()) {
        return Result(v1::ERROR, config_.reward_wrong(),
                      absl::StrCat("sandbox: ", run.status().message()));
      }
      if (run->timed_out) {
        return Result(v1::TIMEOUT, config_.timeout_reward(),
                      absl::StrCat("timeout: ", where, " ran past ", config_.deadline_ms(),
                                   " ms; process group killed"));
      }
      const bool clean = WIFEXITED(run->wait_status) && WEXITSTATUS(run->wait_status) == 0;
      if (!clean) {
        const std::string what = Classify(*run);
        return Result(what == "cpu_limit" ? v1::TIMEOUT : v1::WRONG,
                      what == "cpu_limit" ? config_.timeout_reward() : config_.reward_wrong(),
                      absl::StrCat(what, ": ", where, ": ", Child::DescribeExit(run->wait_status),
                                   "; ", Show(LastLine(run->err))));
      }
      if (Normalize(run->out) != Normalize(tests[i].output)) {
        return Result(v1::WRONG, config_.reward_wrong(),
                      absl::StrCat("wrong_output: ", where, ": expected ", Show(tests[i].output),
                                   ", got ", Show(run->out)));
      }
    }
    return Result(v1::CORRECT, config_.reward_correct(),
                  absl::StrCat("passed ", tests.size(), "/", tests.size(), " tests (",
                               mode_ == SandboxMode::kBwrap ? "bwrap" : "rlimits", ")"));
  }

 private:
  v1::VerifierConfig config_;
  SandboxMode mode_;
  SandboxLimits limits_;
};

}  // namespace

absl::Status RegisterCodeExecVerifier(VerifierRegistry& registry) {
  return registry.Register(
      "code_exec",
      [](const v1::VerifierConfig& c) -> absl::StatusOr<std::unique_ptr<Verifier>> {
        absl::StatusOr<SandboxMode> mode = plugin::ChooseSandbox(
            c.sandbox() == v1::VerifierConfig::RLIMITS ? plugin::SandboxChoice::kRlimits
            : c.sandbox() == v1::VerifierConfig::BWRAP ? plugin::SandboxChoice::kBwrap
                                                       : plugin::SandboxChoice::kAuto,
            "verifier code_exec", "verifier.sandbox", "docs/verifier-plugins.md");
        if (!mode.ok()) return mode.status();
        return std::make_unique<CodeExec>(c, *mode);
      },
      [](const v1::VerifierConfig& c) -> absl::Status {
        std::vector<std::string> bad;
        if (c.deadline_ms() < 1) bad.push_back(absl::StrCat("deadline_ms: must be >= 1, found ", c.deadline_ms()));
        if (c.cpu_seconds() < 1) bad.push_back(absl::StrCat("cpu_seconds: must be >= 1, found ", c.cpu_seconds()));
        if (c.memory_mb() < 16) bad.push_back(absl::StrCat("memory_mb: must be >= 16, found ", c.memory_mb()));
        if (c.max_processes() < 1) bad.push_back(absl::StrCat("max_processes: must be >= 1, found ", c.max_processes()));
        if (c.max_file_mb() < 0) bad.push_back(absl::StrCat("max_file_mb: must be >= 0, found ", c.max_file_mb()));
        if (!bad.empty()) return absl::InvalidArgumentError(absl::StrCat("verifier.", bad[0]));
        return absl::OkStatus();
      });
}

}  // namespace trellis::verifier::internal
