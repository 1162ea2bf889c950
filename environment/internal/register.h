#ifndef TRELLIS_ENVIRONMENT_INTERNAL_REGISTER_H_
#define TRELLIS_ENVIRONMENT_INTERNAL_REGISTER_H_

// Registration of each built-in; RegisterBuiltinEnvironments calls them all.

#include "absl/status/status.h"
#include "environment/environment.h"

namespace trellis::environment::internal {

// guess_number (guess_number.cc).
[[nodiscard]] absl::Status RegisterGuessNumber(EnvironmentRegistry& registry);
// python_tool (python_tool.cc).
[[nodiscard]] absl::Status RegisterPythonTool(EnvironmentRegistry& registry);
// subprocess (subprocess.cc).
[[nodiscard]] absl::Status RegisterSubprocessEnvironment(EnvironmentRegistry& registry);

}  // namespace trellis::environment::internal

#endif  // TRELLIS_ENVIRONMENT_INTERNAL_REGISTER_H_
