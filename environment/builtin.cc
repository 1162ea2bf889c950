#include "environment/builtin.h"

#include "environment/internal/register.h"

namespace trellis::environment {

absl::Status RegisterBuiltinEnvironments(EnvironmentRegistry& registry) {
  if (absl::Status s = internal::RegisterGuessNumber(registry); !s.ok()) return s;
  if (absl::Status s = internal::RegisterPythonTool(registry); !s.ok()) return s;
  return internal::RegisterSubprocessEnvironment(registry);
}

}  // namespace trellis::environment
