// The environment conformance suite (environment/testing/environment_conformance.h)
// over the built-ins, each made by the registry (so through the pool):
// guess_number, python_tool, and "subprocess" running
// environment/python/from_doc_environment.py, a plugin written from
// docs/environment-protocol.md alone.

#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "environment/builtin.h"
#include "environment/testing/environment_conformance.h"
#include "plugin/sandbox.h"

namespace trellis::environment::conformance {
namespace {

absl::StatusOr<std::unique_ptr<Environment>> Make(v1::EnvironmentConfig config) {
  EnvironmentRegistry registry;
  if (absl::Status s = RegisterBuiltinEnvironments(registry); !s.ok()) return s;
  config.set_workers(3);
  return registry.Create(config);
}

// Binary search over the range "LOW-HIGH?" the Open announced, steered by
// ">" (higher) and "<" (lower).
Policy GuessPolicy() {
  struct State {
    long low = 0, high = 0, guess = 0;
    bool started = false;
  };
  auto s = std::make_shared<State>();
  return [s](const std::string& observation) {
    if (!s->started) {
      s->started = true;
      if (std::sscanf(observation.c_str(), "%ld-%ld?", &s->low, &s->high) != 2)
        return std::string("?");
    } else if (observation == ">") {
      s->low = s->guess + 1;
    } else if (observation == "<") {
      s->high = s->guess - 1;
    }
    s->guess = s->low + (s->high - s->low) / 2;
    return absl::StrCat("I guess ", s->guess, ".");
  };
}

EnvironmentCase GuessNumber() {
  v1::EnvironmentConfig config;
  config.set_name("guess_number");
  config.set_options_json(R"({"low": 1, "high": 100})");
  return {"guess_number", [config] { return Make(config); }, {}, GuessPolicy};
}

// Prints 6*7 with the tool, then answers what it printed.
EnvironmentCase PythonTool() {
  v1::EnvironmentConfig config;
  config.set_name("python_tool");
  config.set_options_json(plugin::BwrapWorks() ? R"({"sandbox": "bwrap"})"
                                               : R"({"sandbox": "rlimits"})");
  v1::OpenEpisodeRequest item;
  item.set_prompt("What is 6*7?");
  item.set_answer("42");
  auto policy = [] {
    auto turn = std::make_shared<int>(0);
    return Policy([turn](const std::string& observation) {
      return (*turn)++ == 0 ? std::string("Let me compute. <py>print(6*7)</py>")
                            : absl::StrCat("The answer is ", observation);
    });
  };
  return {"python_tool", [config] { return Make(config); }, item, policy, 4};
}

EnvironmentCase FromDocPlugin() {
  v1::EnvironmentConfig config;
  config.set_name("subprocess");
  config.add_command(TRELLIS_PYTHON3);
  config.add_command(TRELLIS_SOURCE_DIR "/environment/python/from_doc_environment.py");
  return {"from_doc_subprocess", [config] { return Make(config); }, {}, GuessPolicy};
}

INSTANTIATE_TEST_SUITE_P(Builtins, EnvironmentConformanceTest,
                         ::testing::Values(GuessNumber(), PythonTool(), FromDocPlugin()),
                         EnvironmentCaseName);

}  // namespace
}  // namespace trellis::environment::conformance
