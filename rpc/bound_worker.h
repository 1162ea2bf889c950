#ifndef TRELLIS_RPC_BOUND_WORKER_H_
#define TRELLIS_RPC_BOUND_WORKER_H_

// The server side of a role service: the role's engine, bound once the
// worker has its assignment (a service starts before it, to report its
// address), with calls serialized and every failure, exceptions included,
// turned into a grpc::Status that keeps the message.

#include <exception>
#include <string>
#include <utility>

#include <grpcpp/support/status.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "rpc/status.h"

namespace trellis::rpc {

// How an exception thrown by a worker becomes a status; `where` names the
// role. The role services pass model::StatusFromException, the conversion
// their engines' own entry points use.
using ExceptionToStatus = absl::Status (*)(std::exception_ptr error, absl::string_view where);

template <typename Worker>
class BoundWorker {
 public:
  BoundWorker(std::string role, ExceptionToStatus to_status)
      : role_(std::move(role)), to_status_(to_status) {}

  // `worker` must outlive this object, or be unbound (nullptr) first.
  void Bind(Worker* worker) {
    absl::MutexLock lock(&mu_);
    worker_ = worker;
  }

  // Runs fn(worker) -> absl::StatusOr<Response> into *out, one call at a
  // time. FAILED_PRECONDITION before Bind.
  template <typename Response, typename Fn>
  grpc::Status Unary(Response* out, Fn&& fn) {
    return ToGrpc(Run([&](Worker& worker) -> absl::Status {
      absl::StatusOr<Response> result = fn(worker);
      if (!result.ok()) return result.status();
      *out = *std::move(result);
      return absl::OkStatus();
    }));
  }

  // Runs fn(worker) -> absl::Status, one call at a time.
  template <typename Fn>
  absl::Status Run(Fn&& fn) {
    absl::MutexLock lock(&mu_);
    if (worker_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(role_, ": no assignment yet (the worker is still registering)"));
    }
    try {
      return fn(*worker_);
    } catch (...) {
      return to_status_(std::current_exception(), role_);
    }
  }

 private:
  const std::string role_;
  const ExceptionToStatus to_status_;
  absl::Mutex mu_;
  Worker* worker_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace trellis::rpc

#endif  // TRELLIS_RPC_BOUND_WORKER_H_
