#ifndef TRELLIS_ENVIRONMENT_INTERNAL_EPISODES_H_
#define TRELLIS_ENVIRONMENT_INTERNAL_EPISODES_H_

// The open episodes of an in-process environment, by episode id, with the
// errors every built-in gives: AlreadyExists for an id opened twice,
// NotFound for one not open (never opened, or closed), FailedPrecondition
// for a step after done (State has a bool `done`). Thread-safe; a
// state is copied out for a step and put back after it, so slow steps of
// different episodes run at once.

#include <map>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace trellis::environment::internal {

template <typename State>
class Episodes {
 public:
  [[nodiscard]] absl::Status Add(const std::string& id, State state) {
    absl::MutexLock lock(&mu_);
    if (!open_.emplace(id, std::move(state)).second) {
      return absl::AlreadyExistsError(absl::StrCat("episode \"", id, "\" is already open"));
    }
    return absl::OkStatus();
  }

  // The state of an episode still running: NotFound when it is not open,
  // FailedPrecondition when its State::done is set.
  [[nodiscard]] absl::StatusOr<State> Running(const std::string& id) const {
    absl::MutexLock lock(&mu_);
    auto it = open_.find(id);
    if (it == open_.end()) {
      return absl::NotFoundError(absl::StrCat("episode \"", id, "\" is not open"));
    }
    if (it->second.done) {
      return absl::FailedPreconditionError(absl::StrCat("episode \"", id, "\" is done"));
    }
    return it->second;
  }

  // Stores `state` for `id` unless the episode was closed meanwhile.
  void Put(const std::string& id, State state) {
    absl::MutexLock lock(&mu_);
    auto it = open_.find(id);
    if (it != open_.end()) it->second = std::move(state);
  }

  // OK whether or not `id` was open: closing twice is harmless.
  void Remove(const std::string& id) {
    absl::MutexLock lock(&mu_);
    open_.erase(id);
  }

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, State> open_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trellis::environment::internal

#endif  // TRELLIS_ENVIRONMENT_INTERNAL_EPISODES_H_
