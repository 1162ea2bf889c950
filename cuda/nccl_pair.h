#ifndef TRELLIS_CUDA_NCCL_PAIR_H_
#define TRELLIS_CUDA_NCCL_PAIR_H_

// NCCL communicators: two-rank ones for point-to-point transfers between
// GPUs (the NCCL weight transport, weightsync/nccl_transport.h) and N-rank
// ones for collectives (the learner's data-parallel group,
// learner/internal/nccl_group.cc): NCCL status conversion and a
// non-blocking communicator whose every wait has a deadline (CUDA's status
// and device buffers: cuda_memory.h). Built only with CUDA and NCCL.

#include <c10/core/ScalarType.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cuda/cuda_memory.h"

namespace trellis::cuda {

inline absl::Status NcclStatus(ncclResult_t r, const char* what) {
  if (r == ncclSuccess || r == ncclInProgress) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("nccl: ", what, ": ", ncclGetErrorString(r)));
}

// NCCL's type for tensors of `type`; `sum`: the collective adds them
// (NCCL moves bool as bytes but cannot add it). InvalidArgument for a type
// it has none for.
inline absl::StatusOr<ncclDataType_t> NcclType(c10::ScalarType type, bool sum) {
  switch (type) {
    case c10::kFloat: return ncclFloat32;
    case c10::kDouble: return ncclFloat64;
    case c10::kHalf: return ncclFloat16;
    case c10::kBFloat16: return ncclBfloat16;
    case c10::kLong: return ncclInt64;
    case c10::kInt: return ncclInt32;
    case c10::kChar: return ncclInt8;
    case c10::kByte: return ncclUint8;
    case c10::kBool:
      if (!sum) return ncclUint8;
      break;
    default: break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("nccl cannot ", sum ? "sum" : "move", " ", c10::toString(type), " tensors"));
}

// A non-blocking communicator of `ranks` ranks (two by default) and its
// stream. Destruction aborts, which never waits on the peers.
class NcclComm {
 public:
  static absl::StatusOr<std::unique_ptr<NcclComm>> Init(const ncclUniqueId& id, int rank,
                                                        int device, absl::Time deadline,
                                                        int ranks = 2) {
    auto c = std::unique_ptr<NcclComm>(new NcclComm());
    if (absl::Status s = CudaStatus(cudaSetDevice(device), "cudaSetDevice"); !s.ok()) {
      return s;
    }
    if (absl::Status s = CudaStatus(cudaStreamCreateWithFlags(&c->stream_, cudaStreamNonBlocking),
                                    "cudaStreamCreate");
        !s.ok()) {
      return s;
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    if (absl::Status s = NcclStatus(ncclCommInitRankConfig(&c->comm_, ranks, id, rank, &config),
                                    "ncclCommInitRankConfig");
        !s.ok()) {
      return s;
    }
    if (absl::Status s = c->WaitReady(deadline, "connecting"); !s.ok()) {
      return s;
    }
    return c;
  }

  ~NcclComm() {
    if (comm_ != nullptr) ncclCommAbort(comm_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // Sends (rank 0) or receives (rank 1) `n[i]` bytes at `ptr[i]`, all in
  // one group, and waits for the stream until `deadline`.
  absl::Status Transfer(bool send, const std::vector<void*>& ptr, const std::vector<size_t>& n,
                        absl::Time deadline) {
    const int peer = send ? 1 : 0;
    absl::Status s = NcclStatus(ncclGroupStart(), "ncclGroupStart");
    for (size_t i = 0; s.ok() && i < ptr.size(); ++i) {
      if (n[i] == 0) continue;
      s = send ? NcclStatus(ncclSend(ptr[i], n[i], ncclUint8, peer, comm_, stream_), "ncclSend")
               : NcclStatus(ncclRecv(ptr[i], n[i], ncclUint8, peer, comm_, stream_), "ncclRecv");
    }
    absl::Status end = NcclStatus(ncclGroupEnd(), "ncclGroupEnd");
    if (!s.ok()) return s;
    if (!end.ok()) return end;
    if (absl::Status r = WaitReady(deadline, "posting"); !r.ok()) return r;
    return WaitDone([this] { return cudaStreamQuery(stream_); }, deadline,
                    send ? "sending" : "receiving");
  }

  // Queues `calls` (NCCL calls on stream(), made in one NCCL group) after
  // the work queued so far on `after` (a stream of the same device), which
  // `ready` marks, and records `done` on stream() behind them. Fails as
  // WaitReady when the communicator has not taken them by `deadline`.
  template <typename Calls>
  absl::Status Post(cudaStream_t after, cudaEvent_t ready, cudaEvent_t done, Calls calls,
                    absl::Time deadline, const char* what) {
    absl::Status s = CudaStatus(cudaEventRecord(ready, after), "cudaEventRecord");
    if (s.ok()) s = CudaStatus(cudaStreamWaitEvent(stream_, ready, 0), "cudaStreamWaitEvent");
    if (s.ok()) s = NcclStatus(ncclGroupStart(), "ncclGroupStart");
    if (s.ok()) {
      s = calls();
      const absl::Status end = NcclStatus(ncclGroupEnd(), "ncclGroupEnd");
      if (s.ok()) s = end;
    }
    if (s.ok()) s = WaitReady(deadline, what);
    if (s.ok()) s = CudaStatus(cudaEventRecord(done, stream_), "cudaEventRecord");
    return s;
  }

  // Polls `query` (cudaStreamQuery or cudaEventQuery of work on this
  // communicator) until it reports cudaSuccess, failing on its error, on
  // NCCL's asynchronous error and at `deadline`, each naming `what`.
  template <typename Query>
  absl::Status WaitDone(Query query, absl::Time deadline, const char* what) {
    while (true) {
      const cudaError_t e = query();
      if (e == cudaSuccess) return absl::OkStatus();
      if (e != cudaErrorNotReady) return CudaStatus(e, what);
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) return NcclStatus(async, what);
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat("nccl: ", what, " did not finish in time"));
      }
      absl::SleepFor(absl::Microseconds(100));
    }
  }

  // Waits until the communicator has taken the calls made so far (a
  // non-blocking one may still be posting them), failing as WaitDone.
  absl::Status WaitReady(absl::Time deadline, const char* what) {
    while (true) {
      ncclResult_t state = ncclSuccess;
      if (absl::Status s =
              NcclStatus(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError");
          !s.ok()) {
        return s;
      }
      if (state == ncclSuccess) return absl::OkStatus();
      if (state != ncclInProgress) return NcclStatus(state, what);
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat("nccl: ", what, " timed out"));
      }
      absl::SleepFor(absl::Milliseconds(1));
    }
  }

  ncclComm_t get() const { return comm_; }
  cudaStream_t stream() const { return stream_; }

 private:
  NcclComm() = default;

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace trellis::cuda

#endif  // TRELLIS_CUDA_NCCL_PAIR_H_
