#ifndef TRELLIS_CONFIG_WORKER_ID_H_
#define TRELLIS_CONFIG_WORKER_ID_H_

// A job's processes by role and index, written "<role>-<index>"
// ("learner-0", "actor-3"): in ledger records, messages, logs, the
// placement table and a worker's Assignment. The scheduler, one process, is
// written "scheduler".

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trellis/v1/scheduler.pb.h"

namespace trellis::config {

// "actor", "learner", "reference", "verifier", "scheduler".
std::string RoleName(v1::Role role);

class WorkerId {
 public:
  // REQUIRES: index >= 0; 0 for the scheduler.
  explicit WorkerId(v1::Role role, int index = 0) : role_(role), index_(index) {}

  // ToString's inverse: InvalidArgument naming `text` and the expected form
  // for anything else.
  static absl::StatusOr<WorkerId> Parse(absl::string_view text);

  v1::Role role() const { return role_; }
  int index() const { return index_; }
  std::string ToString() const;

  friend bool operator==(const WorkerId& a, const WorkerId& b) {
    return a.role_ == b.role_ && a.index_ == b.index_;
  }
  friend bool operator!=(const WorkerId& a, const WorkerId& b) { return !(a == b); }

 private:
  v1::Role role_;
  int index_;
};

}  // namespace trellis::config

#endif  // TRELLIS_CONFIG_WORKER_ID_H_
