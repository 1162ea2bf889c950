#include "launch/environment_server.h"

#include <pthread.h>

#include <csignal>
#include <memory>

#include "absl/strings/str_cat.h"
#include "config/job_config.h"
#include "env/env.h"
#include "environment_service/environment_service.h"
#include "roles/local_roles.h"
#include "rpc/server.h"

namespace trellis::launch {

absl::Status ServeEnvironment(const EnvironmentServerOptions& options, std::ostream& log) {
  if (options.job.empty()) {
    return absl::InvalidArgumentError("--job JOB.yaml is required (its environment is served)");
  }
  if (options.listen.empty()) {
    return absl::InvalidArgumentError("--listen HOST:PORT is required (port 0 picks a free one)");
  }
  absl::StatusOr<v1::JobConfig> job = config::LoadJobFile(options.job);
  if (!job.ok()) return job.status();
  if (job->environment().name().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment.name: ", options.job, " names no environment to serve"));
  }
  absl::StatusOr<std::unique_ptr<environment::Environment>> made =
      roles::MakeEnvironment(job->environment());
  if (!made.ok()) {
    // NotFound names the field and the registered environments: bad input.
    if (absl::IsNotFound(made.status())) return absl::InvalidArgumentError(made.status().message());
    return made.status();
  }
  // The signals are waited for below; blocked before the server's threads
  // start, so that none of them takes one.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  std::unique_ptr<v1::Environment::Service> service =
      environment::NewEnvironmentService(made->get());
  rpc::ServerOptions serving;
  serving.advertise = options.advertise;
  absl::StatusOr<std::unique_ptr<rpc::Server>> server =
      rpc::Server::Start(options.listen, {service.get()}, serving);
  if (!server.ok()) return server.status();
  (*server)->SetServing(true);
  if (!options.address_file.empty()) {
    if (absl::Status s =
            env::Env::Default()->WriteFileAtomically(options.address_file, (*server)->address());
        !s.ok()) {
      return s;
    }
  }
  log << "environment: serving \"" << job->environment().name() << "\" on " << (*server)->address()
      << std::endl;
  int signal = 0;
  sigwait(&stop, &signal);
  log << "environment: stopped by signal " << signal << std::endl;
  (*server)->Shutdown();
  return absl::OkStatus();
}

}  // namespace trellis::launch
