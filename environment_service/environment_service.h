#ifndef TRELLIS_ENVIRONMENT_SERVICE_ENVIRONMENT_SERVICE_H_
#define TRELLIS_ENVIRONMENT_SERVICE_ENVIRONMENT_SERVICE_H_

// Environments over gRPC (trellis.v1.Environment,
// environment_service/README.md): a service that serves any
// environment::Environment, and the "remote" environment that plays
// episodes on such a service elsewhere (a Python server, another process).
// Kept out of trellis::environment so that it builds without gRPC.

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "environment/environment.h"
#include "trellis/v1/environment.grpc.pb.h"

namespace trellis::environment {

// Serves trellis.v1.Environment with `environment` (not owned; it must
// outlive the service).
//  - A request without episode_id, or a Step with a negative turn, is
//    INVALID_ARGUMENT naming the field; the environment is not called.
//  - At most environment->MaxConcurrency() calls reach the environment at
//    once; a call that cannot start before the caller's deadline is
//    DEADLINE_EXCEEDED, and so is one the environment answers after it (an
//    Open answered too late, or after the caller cancelled, is closed
//    again, so no episode is left open).
//  - The environment's status becomes the call's (codes one to one, the
//    message kept); an exception it throws is INTERNAL naming the call.
//  - Replies are passed on as the environment gives them: the client
//    judges them (NewRemoteEnvironment refuses a non-finite reward).
std::unique_ptr<v1::Environment::Service> NewEnvironmentService(Environment* environment);

// An environment whose every call is one call to the trellis.v1.Environment
// service at config.address, with a deadline of config.call_deadline_ms.
// A failed call's status says what the caller should do (as
// environment/environment.h asks): DeadlineExceeded when the service did not
// answer in time, Unavailable when it cannot be reached, InvalidArgument
// ("malformed") for a reply with a non-finite reward, Internal for any
// other failure (the service's own code named in the message). Messages
// start with "the environment at ADDRESS CALL". MaxConcurrency() is
// config.workers. The channel connects lazily: a service that is not up
// yet fails the first calls, not the construction.
// InvalidArgument naming the field for an empty environment.address, a
// call_deadline_ms or workers below 1.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Environment>> NewRemoteEnvironment(
    const v1::EnvironmentConfig& config);

// Registers NewRemoteEnvironment as "remote".
[[nodiscard]] absl::Status RegisterRemoteEnvironment(EnvironmentRegistry& registry);

}  // namespace trellis::environment

#endif  // TRELLIS_ENVIRONMENT_SERVICE_ENVIRONMENT_SERVICE_H_
