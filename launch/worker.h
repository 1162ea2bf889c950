#ifndef TRELLIS_LAUNCH_WORKER_H_
#define TRELLIS_LAUNCH_WORKER_H_

// One role as its own process (`trellis serve ROLE --scheduler ADDR`):
// starts the role's gRPC service, registers with the scheduler (role,
// address, capabilities), receives its assignment (the job, its id, the
// weight transport), builds the role's engine, serves it, sends
// heartbeats, and forwards its ledger records to the scheduler in batches
// off the step's path (ledger_forwarder.h). Returns
// when the scheduler says the job is over (OK), or when the scheduler has
// been unreachable past the job's stall timeout (Unavailable; it warns at
// the heartbeat timeout). An actor drains on SIGTERM (drain_signal.h) and
// returns OK once the scheduler releases it. Started without --index while
// the job runs, an actor joins its pool (Scheduler.Register).

#include <optional>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "trellis/v1/scheduler.pb.h"

namespace trellis::launch {

struct WorkerOptions {
  v1::Role role = v1::ROLE_UNSPECIFIED;
  // The scheduler's host:port.
  std::string scheduler;
  // Where this worker's service listens; port 0 picks a free one.
  std::string listen = "127.0.0.1:0";
  // When set, host:port of this worker's Prometheus /metrics (port 0 picks
  // a free one, logged): its ledger's memory objects, its gRPC calls
  // (counts and seconds by method), trellis_worker_up.
  std::string metrics;
  // The host other machines reach this worker by: it is registered with the
  // scheduler, and the weight transport binds and advertises it too (the
  // learner's store and gloo device, an actor's gloo device). Empty: the
  // listen host, which then must not be a wildcard (0.0.0.0).
  std::string advertise;
  // The learner's weight-transport port (the rendezvous store the actors
  // rendezvous on); 0 picks a free one. Fixed, it can be opened in a
  // firewall or named by a Service.
  int transport_port = 0;
  // The index the launcher gives it (id "<role>-<index>"); unset: the next.
  std::optional<int> index;
  absl::Duration register_timeout = absl::Minutes(5);
};

// "actor" -> ACTOR, ...; InvalidArgument naming the roles otherwise.
[[nodiscard]] absl::StatusOr<v1::Role> ParseRole(const std::string& name);

[[nodiscard]] absl::Status ServeWorker(const WorkerOptions& options, std::ostream& log);

}  // namespace trellis::launch

#endif  // TRELLIS_LAUNCH_WORKER_H_
