#ifndef TRELLIS_SCHEDULER_WORKER_REGISTRY_H_
#define TRELLIS_SCHEDULER_WORKER_REGISTRY_H_

// The scheduler's view of its workers: who registered for which role, where
// they listen, and whether they are alive (heartbeats). A worker silent
// past the stall limit is stalled (and may come back: a stopped process,
// a long pause); silent past the dead limit it is declared dead once, and
// stays dead. Actors may join while the job runs and be drained: a drained
// actor is released once the actor pool no longer calls it, and then it
// leaves (neither alive nor dead).
//
// Thread-safe.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "env/env.h"
#include "trellis/v1/job.pb.h"
#include "trellis/v1/scheduler.pb.h"

namespace trellis::scheduler {

struct WorkerInfo {
  std::string id;  // config::WorkerId(role, index)
  v1::Role role = v1::ROLE_UNSPECIFIED;
  int index = 0;
  v1::RegisterRequest request;
  absl::Time last_seen;
  // Its first heartbeat came: it built its role and serves it.
  bool ready = false;
  // Silent past SilenceLimits::stall, and not yet heard from again.
  bool stalled = false;
  bool dead = false;
  // Actors: asked to drain (DrainWorker, or SIGTERM to the process).
  bool draining = false;
  // Actors: drained, and no call of the job reaches it any more: it exits.
  bool released = false;
};

struct SilenceLimits {
  absl::Duration stall;  // silent this long: stalled (waited for)
  absl::Duration dead;   // silent this long: dead (given up on)
};

// What one CheckSilence changed; each worker appears at most once.
struct SilenceChanges {
  std::vector<WorkerInfo> stalled;    // newly silent past `stall`
  std::vector<WorkerInfo> recovered;  // stalled, and heartbeating again
  std::vector<WorkerInfo> dead;       // newly silent past `dead`
};

class WorkerRegistry {
 public:
  // Expects deployment.<role>.count workers of each role (the reference
  // only when grpo.kl_coef > 0). Heartbeats, silence and WaitComplete's
  // timeout are measured on env's clock. REQUIRES: `env` outlives this.
  explicit WorkerRegistry(const v1::JobConfig& job, env::Env* env = env::Env::Default());

  // Admits a worker and returns its id. InvalidArgument for an unknown
  // role or missing address; FailedPrecondition when the role is full or
  // the index is out of range or taken by a live worker. Each slot is given
  // once: the same process asking again (same pid and address) gets the
  // same id; a worker naming the slot of one declared dead (a restart)
  // takes it over, alive and not yet ready. An actor without an index once
  // the job has its actors joins: it gets the next free index (unless
  // joins are refused).
  [[nodiscard]] absl::StatusOr<std::string> Add(const v1::RegisterRequest& request);

  // Actors beyond the expected count are refused from now on, `why` in the
  // error (the weight transport's receiver slots are fixed, say).
  void RefuseJoiners(std::string why);

  // Marks an actor draining. NotFound for an unknown id, InvalidArgument
  // for a worker that is not an actor, FailedPrecondition for one declared
  // dead or released.
  [[nodiscard]] absl::Status Drain(const std::string& id);
  // The actor pool gave up calling `id` after it drained: it may exit.
  void Release(const std::string& id);
  bool Released(const std::string& id) const;

  // Waits until every expected worker has registered (and, with `ready`,
  // sent its first heartbeat: workers start heartbeats once they serve);
  // DeadlineExceeded naming the roles still short otherwise.
  [[nodiscard]] absl::Status WaitComplete(absl::Duration timeout, bool ready = false);

  // Marks the worker ready and alive now. NotFound for an unknown id;
  // FailedPrecondition for a dead one (it must not come back silently: its
  // work was given to others).
  [[nodiscard]] absl::Status Heartbeat(const std::string& id);

  // Marks ready, live workers stalled or dead by how long they have been
  // silent, and reports what changed since the last call. Workers still
  // building their role are bounded by WaitComplete's timeout instead.
  // REQUIRES: limits.stall <= limits.dead.
  SilenceChanges CheckSilence(const SilenceLimits& limits);

  // Marks `id` dead (e.g. after its calls failed); false if it already was.
  bool MarkDead(const std::string& id);

  // Neither dead nor released.
  bool Alive(const std::string& id) const;
  // Registered workers of `role` by index.
  std::vector<WorkerInfo> Workers(v1::Role role) const;
  // Workers neither dead nor released.
  std::vector<std::string> LiveIds() const;
  int Expected(v1::Role role) const;

 private:
  env::Env* const env_;
  std::map<v1::Role, int> expected_;
  mutable absl::Mutex mu_;
  std::optional<std::string> joins_refused_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, WorkerInfo> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trellis::scheduler

#endif  // TRELLIS_SCHEDULER_WORKER_REGISTRY_H_
