#ifndef TRELLIS_ENVIRONMENT_ENVIRONMENT_H_
#define TRELLIS_ENVIRONMENT_ENVIRONMENT_H_

// Environments of multi-turn rollouts (docs/environment-protocol.md): an
// episode is opened for a dataset item, takes the policy's actions one turn
// at a time and answers each with an observation, a reward and whether it
// is done. Built-ins and plugins register by name in an
// EnvironmentRegistry; the scheduler's loop reaches them through the pool
// (deadlines, circuit breaker, counts) the registry wraps around each.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trellis/v1/environment.pb.h"
#include "trellis/v1/job.pb.h"

namespace trellis::environment {

// One environment; many episodes run at once, so every method is called
// from several threads (MaxConcurrency() of them at most). A failed call
// is a status: DeadlineExceeded for a call past its deadline,
// Unavailable for a service that cannot be reached, InvalidArgument for a
// reply that is garbage (a non-finite reward), Internal otherwise.
class Environment {
 public:
  virtual ~Environment() = default;
  [[nodiscard]] virtual absl::StatusOr<v1::OpenEpisodeResponse> Open(
      const v1::OpenEpisodeRequest& request) = 0;
  [[nodiscard]] virtual absl::StatusOr<v1::EnvironmentStepResponse> Step(
      const v1::EnvironmentStepRequest& request) = 0;
  [[nodiscard]] virtual absl::Status Close(const v1::CloseEpisodeRequest& request) = 0;
  // Episodes this environment can serve at once.
  virtual int MaxConcurrency() const { return 1; }
};

// The errors_by_reason key of a failed call: "deadline"
// (DeadlineExceeded), "circuit_open" (refused by the pool's breaker,
// marked by CircuitOpen), "unavailable" (other Unavailable), "malformed"
// (InvalidArgument), "call_failed" (anything else).
std::string FailureReason(const absl::Status& status);
// `status` marked as a call the circuit breaker refused.
absl::Status CircuitOpen(absl::Status status);

using EnvironmentFactory = std::function<absl::StatusOr<std::unique_ptr<Environment>>(
    const v1::EnvironmentConfig& config)>;

class EnvironmentRegistry {
 public:
  // AlreadyExists when `name` is taken.
  [[nodiscard]] absl::Status Register(const std::string& name, EnvironmentFactory factory);
  // NotFound naming the registered environments when config.name is
  // unknown. The environment comes wrapped in the pool
  // (environment/pool.h).
  [[nodiscard]] absl::StatusOr<std::unique_ptr<Environment>> Create(
      const v1::EnvironmentConfig& config) const;
  bool Contains(const std::string& name) const;
  // The registered names, sorted.
  std::vector<std::string> Names() const;

 private:
  std::map<std::string, EnvironmentFactory> factories_;
};

}  // namespace trellis::environment

#endif  // TRELLIS_ENVIRONMENT_ENVIRONMENT_H_
