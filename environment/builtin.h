#ifndef TRELLIS_ENVIRONMENT_BUILTIN_H_
#define TRELLIS_ENVIRONMENT_BUILTIN_H_

// The built-in environments (docs/environment-protocol.md, "Built-ins"):
// guess_number: find a secret integer drawn from the episode's seed; each
//   action's last integer is a guess, answered ">" (higher), "<" (lower) or
//   "=" (reward 1, done).
// python_tool: the code after the action's last "<py>" (up to "</py>") runs
//   in the code sandbox (plugin/sandbox.h) and its output is the
//   observation; an action without "<py>" is the final answer, compared
//   with the item's answer by a verifier (default "math"): reward 1 when it
//   matches, done.
// subprocess: a pool of plugin processes speaking JSON lines (open, step,
//   close), each episode kept by the worker that opened it.

#include "absl/status/status.h"
#include "environment/environment.h"

namespace trellis::environment {

[[nodiscard]] absl::Status RegisterBuiltinEnvironments(EnvironmentRegistry& registry);

}  // namespace trellis::environment

#endif  // TRELLIS_ENVIRONMENT_BUILTIN_H_
