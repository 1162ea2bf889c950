// RegisterRemoteEnvironment (environment_service.h), in a file of its own:
// a program that only makes remote environments directly does not link the
// registry.

#include "environment_service/environment_service.h"

namespace trellis::environment {

absl::Status RegisterRemoteEnvironment(EnvironmentRegistry& registry) {
  return registry.Register("remote", NewRemoteEnvironment);
}

}  // namespace trellis::environment
