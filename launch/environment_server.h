#ifndef TRELLIS_LAUNCH_ENVIRONMENT_SERVER_H_
#define TRELLIS_LAUNCH_ENVIRONMENT_SERVER_H_

// A job's environment as its own process (`trellis serve environment`):
// makes the job's `environment` section with the environment registry
// (roles::MakeEnvironment: a built-in, a plugin, a kind added to the
// registry, wrapped in the pool for deadlines and counts), serves it as
// trellis.v1.Environment (environment_service/environment_service.h) with
// the process's secret (rpc/auth.h), and stops on SIGINT or SIGTERM. A
// launched job reaches it with the "remote" environment
// (environment.address).

#include <ostream>
#include <string>

#include "absl/status/status.h"

namespace trellis::launch {

struct EnvironmentServerOptions {
  // The job file whose `environment` section is served.
  std::string job;
  // Where the service listens ("host:port"; port 0 picks a free one).
  std::string listen;
  // The host others dial, needed with a wildcard listen host.
  std::string advertise;
  // When set, the address callers dial is written there once serving.
  std::string address_file;
};

// Serves the job's environment until SIGINT or SIGTERM (OK then), closing
// it before it returns. InvalidArgument naming what is wrong for no job
// file or listen address, a job without an environment or with an unknown
// environment name; the job loader's error for a bad job file; the
// server's when it cannot bind.
[[nodiscard]] absl::Status ServeEnvironment(const EnvironmentServerOptions& options,
                                            std::ostream& log);

}  // namespace trellis::launch

#endif  // TRELLIS_LAUNCH_ENVIRONMENT_SERVER_H_
