#ifndef TRELLIS_PLUGIN_LINE_WORKER_H_
#define TRELLIS_PLUGIN_LINE_WORKER_H_

// One long-lived plugin process speaking JSON lines, the framing of the
// subprocess verifier and the subprocess environment
// (docs/verifier-plugins.md, docs/environment-protocol.md): each request is
// one line carrying a fresh "id", each answer one line that may echo it.
// The process starts on first use; it is killed with its process group
// when it misses a deadline, writes more than one line for a request, or
// writes output nobody asked for, and reaped when it dies; the next call
// starts it afresh. Not thread-safe: one caller at a time.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "plugin/process.h"

namespace trellis::plugin {

class LineWorker {
 public:
  // argv[0] is looked up in PATH. `name` ("plugin worker 3") starts
  // messages.
  LineWorker(std::vector<std::string> argv, std::string name)
      : argv_(std::move(argv)), name_(std::move(name)) {}

  // Sets request["id"] to the next id, sends the request and returns the
  // answer line. Lines that echo an earlier request's "id" (answers that
  // came after their deadline) are skipped. Errors, each message starting
  // with the worker's name:
  //   Unavailable: the process could not be started;
  //   DeadlineExceeded: no answer by `deadline` (killed);
  //   Aborted: the process died or closed its stdout (the message says how
  //     it ended: "exit status 3");
  //   DataLoss: a line over `max_line_bytes`, or more than one line for one
  //     request (killed).
  [[nodiscard]] absl::StatusOr<std::string> Call(nlohmann::json& request, absl::Time deadline,
                                                 size_t max_line_bytes = 1 << 20);

  const std::string& name() const { return name_; }
  // Starts at 1, and grows each time the process goes (killed or dead):
  // what a process held is lost when it changes.
  uint64_t generation() const { return generation_; }
  // The process id of the running process, or -1.
  pid_t pid() const { return child_ == nullptr ? -1 : child_->pid(); }

 private:
  // Kills (or, after it closed its pipes, waits a moment for) the process
  // and forgets it; returns how it ended.
  std::string Reap(bool kill);

  const std::vector<std::string> argv_;
  const std::string name_;
  std::unique_ptr<Child> child_;
  uint64_t generation_ = 1;
  uint64_t next_id_ = 1;
};

}  // namespace trellis::plugin

#endif  // TRELLIS_PLUGIN_LINE_WORKER_H_
