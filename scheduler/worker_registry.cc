#include "scheduler/worker_registry.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "config/job_config.h"
#include "config/worker_id.h"
#include "loop/recipe.h"

namespace trellis::scheduler {

WorkerRegistry::WorkerRegistry(const v1::JobConfig& job, env::Env* env) : env_(env) {
  for (v1::Role role : {v1::ACTOR, v1::LEARNER, v1::REFERENCE, v1::VERIFIER}) {
    expected_[role] = loop::WorkersNeeded(job, role);
  }
}

int WorkerRegistry::Expected(v1::Role role) const {
  auto it = expected_.find(role);
  return it == expected_.end() ? 0 : it->second;
}

absl::StatusOr<std::string> WorkerRegistry::Add(const v1::RegisterRequest& request) {
  const v1::Role role = request.role();
  if (expected_.count(role) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("role: expected ACTOR, LEARNER, REFERENCE or VERIFIER, found ",
                     static_cast<int>(role)));
  }
  if (request.address().empty()) {
    return absl::InvalidArgumentError("address: required (host:port of the role service)");
  }
  const int expected = Expected(role);
  absl::MutexLock lock(&mu_);
  // Actors past the expected count join the running job (slots beyond it).
  const bool joins = role == v1::ACTOR && !joins_refused_.has_value();
  const std::string why_not = role == v1::ACTOR && joins_refused_.has_value()
                                  ? absl::StrCat("; another actor cannot join: ", *joins_refused_)
                                  : "";
  int index = 0;
  if (request.has_index()) {
    index = request.index();
    if (index < 0 || (index >= expected && !joins)) {
      return absl::FailedPreconditionError(absl::StrCat("index: ", index, " is outside [0, ",
                                                        expected, ") for ",
                                                        config::RoleName(role), why_not));
    }
  } else {
    int taken = 0;
    for (const auto& [id, w] : workers_) taken += w.role == role;
    if (taken >= expected && !joins) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the job needs ", expected, " ", config::RoleName(role), " workers and has them",
          why_not));
    }
    while (workers_.count(config::WorkerId(role, index).ToString())) ++index;
  }
  const std::string id = config::WorkerId(role, index).ToString();
  // Each slot is given once: again only to the same process asking again,
  // or to a worker restarted after its predecessor was declared dead.
  if (auto it = workers_.find(id); it != workers_.end() && !it->second.dead) {
    const v1::RegisterRequest& holder = it->second.request;
    if (holder.pid() == request.pid() && holder.address() == request.address()) return id;
    return absl::FailedPreconditionError(
        absl::StrCat(id, " is already registered (", holder.address(), ")"));
  }
  WorkerInfo& w = workers_[id];
  w = WorkerInfo();
  w.id = id;
  w.role = role;
  w.index = index;
  w.request = request;
  w.last_seen = env_->Now();
  return id;
}

absl::Status WorkerRegistry::WaitComplete(absl::Duration timeout, bool ready) {
  auto count = [this, ready]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::map<v1::Role, int> have;
    for (const auto& [id, w] : workers_) have[w.role] += !ready || w.ready;
    return have;
  };
  auto complete = [this, &count]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::map<v1::Role, int> have = count();
    for (const auto& [role, n] : expected_) {
      if (have[role] < n) return false;
    }
    return true;
  };
  const absl::Time deadline = env_->Now() + timeout;
  absl::MutexLock lock(&mu_);
  if (env_->AwaitWithDeadline(mu_, absl::Condition(&complete), deadline)) {
    return absl::OkStatus();
  }
  std::vector<std::string> short_roles;
  std::map<v1::Role, int> have = count();
  for (const auto& [role, n] : expected_) {
    if (have[role] < n) {
      short_roles.push_back(absl::StrCat(config::RoleName(role), " ", have[role], " of ", n));
    }
  }
  return absl::DeadlineExceededError(
      absl::StrCat("workers did not ", ready ? "start serving" : "register", " within ", absl::FormatDuration(timeout), ": ",
                   absl::StrJoin(short_roles, ", ")));
}

absl::Status WorkerRegistry::Heartbeat(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id);
  if (it == workers_.end()) return absl::NotFoundError(absl::StrCat("unknown worker ", id));
  if (it->second.dead) {
    return absl::FailedPreconditionError(
        absl::StrCat(id, " was declared dead; its work went to other workers"));
  }
  it->second.last_seen = env_->Now();
  it->second.ready = true;
  return absl::OkStatus();
}

SilenceChanges WorkerRegistry::CheckSilence(const SilenceLimits& limits) {
  SilenceChanges changes;
  const absl::Time now = env_->Now();
  absl::MutexLock lock(&mu_);
  for (auto& [id, w] : workers_) {
    // A released actor stops heartbeating as it leaves: gone, not dead.
    if (!w.ready || w.dead || w.released) continue;
    const absl::Duration silent = now - w.last_seen;
    if (silent > limits.dead) {
      w.dead = true;
      changes.dead.push_back(w);
    } else if (silent > limits.stall) {
      if (!w.stalled) {
        w.stalled = true;
        changes.stalled.push_back(w);
      }
    } else if (w.stalled) {
      w.stalled = false;
      changes.recovered.push_back(w);
    }
  }
  return changes;
}

bool WorkerRegistry::MarkDead(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id);
  if (it == workers_.end() || it->second.dead) return false;
  it->second.dead = true;
  return true;
}

void WorkerRegistry::RefuseJoiners(std::string why) {
  absl::MutexLock lock(&mu_);
  joins_refused_ = std::move(why);
}

absl::Status WorkerRegistry::Drain(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id);
  if (it == workers_.end()) return absl::NotFoundError(absl::StrCat("unknown worker ", id));
  WorkerInfo& w = it->second;
  if (w.role != v1::ACTOR) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker_id: ", id, " is not an actor; only actors drain"));
  }
  if (w.dead || w.released) {
    return absl::FailedPreconditionError(
        absl::StrCat(id, w.dead ? " was declared dead" : " has drained already"));
  }
  w.draining = true;
  return absl::OkStatus();
}

void WorkerRegistry::Release(const std::string& id) {
  absl::MutexLock lock(&mu_);
  if (auto it = workers_.find(id); it != workers_.end()) it->second.released = true;
}

bool WorkerRegistry::Released(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id);
  return it != workers_.end() && it->second.released;
}

bool WorkerRegistry::Alive(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id);
  return it != workers_.end() && !it->second.dead && !it->second.released;
}

std::vector<WorkerInfo> WorkerRegistry::Workers(v1::Role role) const {
  absl::MutexLock lock(&mu_);
  std::vector<WorkerInfo> out;
  for (const auto& [id, w] : workers_) {
    if (w.role == role) out.push_back(w);
  }
  std::sort(out.begin(), out.end(),
            [](const WorkerInfo& a, const WorkerInfo& b) { return a.index < b.index; });
  return out;
}

std::vector<std::string> WorkerRegistry::LiveIds() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const auto& [id, w] : workers_) {
    if (!w.dead && !w.released) out.push_back(id);
  }
  return out;
}

}  // namespace trellis::scheduler
