#ifndef TRELLIS_MODEL_TORCH_STATUS_H_
#define TRELLIS_MODEL_TORCH_STATUS_H_

// The LibTorch edge: LibTorch reports failures by throwing (c10::Error from
// its checks, c10::OutOfMemoryError, std::bad_alloc); Trellis by
// absl::Status. Every role's entry points (the actor's, the reference's and
// the learner's GuardTorchErrors decorators) and the role services
// (rpc::BoundWorker) convert here, so an embedded run and a launched run
// fail with the same code and message. No LibTorch header is needed here.

#include <exception>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace trellis::model {

// The status for `error` (not null), its message "<where>: <what>" (for a
// c10::Error without LibTorch's backtrace):
//  - ResourceExhausted, "<where>: out of memory: <what>", for an allocation
//    failure: c10::OutOfMemoryError (CUDA), LibTorch's CPU allocator
//    refusing ("DefaultCPUAllocator: can't allocate memory"), std::bad_alloc;
//  - Internal for any other c10::Error or std::exception (a failed LibTorch
//    check, which this LibTorch build throws as std::runtime_error or
//    c10::Error: a bug of Trellis' or input the role did not check);
//  - Unknown for anything else thrown.
[[nodiscard]] absl::Status StatusFromException(std::exception_ptr error, absl::string_view where);

// The edge for the calls of one worker: Call(name, fn) runs fn() ->
// absl::Status or absl::StatusOr<T>, and an exception that escapes it comes
// back as StatusFromException(that exception, "<worker_id> <name>").
class TorchEdge {
 public:
  explicit TorchEdge(std::string worker_id) : worker_id_(std::move(worker_id)) {}

  template <typename Fn>
  auto Call(absl::string_view name, Fn&& fn) const -> decltype(fn()) {
    try {
      return fn();
    } catch (...) {
      return StatusFromException(std::current_exception(), absl::StrCat(worker_id_, " ", name));
    }
  }

 private:
  const std::string worker_id_;
};

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_TORCH_STATUS_H_
