#include "model/internal/nccl_all_reduce.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <exception>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cuda/cuda_memory.h"
#include "cuda/nccl_pair.h"

namespace trellis::model::internal {
namespace {

// How long the ranks may take to connect, and NCCL to take one rank's
// all-reduce (a non-blocking communicator may wait for its peers).
constexpr absl::Duration kTimeout = absl::Minutes(2);

// One rank's communicator and the events that order its all-reduces after
// the rank's LibTorch stream and that stream after them.
struct Rank {
  std::unique_ptr<cuda::NcclComm> comm;
  cuda::CudaEvent ready;
  cuda::CudaEvent done;
};

class NcclAllReduce final : public RankAllReduce {
 public:
  explicit NcclAllReduce(std::vector<torch::Device> devices) : devices_(std::move(devices)) {}

  absl::Status Begin() override {
    aborted_ = false;
    return ranks_.empty() ? Connect() : absl::OkStatus();
  }

  torch::Tensor Sum(int rank, const torch::Tensor& partial) override {
    TORCH_CHECK(!aborted_, "tensor-parallel all-reduce: another rank failed");
    TORCH_CHECK(rank >= 0 && static_cast<size_t>(rank) < ranks_.size(),
                "tensor-parallel all-reduce: rank ", rank, " outside [0, ", ranks_.size(), ")");
    const torch::Device& device = devices_[rank];
    TORCH_CHECK(partial.device() == device, "tensor-parallel all-reduce: rank ", rank,
                "'s partial is on ", partial.device(), ", the rank on ", device);
    const absl::StatusOr<ncclDataType_t> type = cuda::NcclType(partial.scalar_type(), true);
    TORCH_CHECK(type.ok(), "tensor-parallel all-reduce: ", type.status().message());
    const c10::cuda::CUDAGuard guard(device.index());
    const torch::Tensor in = partial.contiguous();
    torch::Tensor out = torch::empty_like(in);
    Rank& r = ranks_[rank];
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device.index()).stream();
    absl::Status s = r.comm->Post(
        stream, r.ready.get(), r.done.get(),
        [&] {
          return cuda::NcclStatus(ncclAllReduce(in.data_ptr(), out.data_ptr(), in.numel(), *type,
                                                ncclSum, r.comm->get(), r.comm->stream()),
                                  "ncclAllReduce");
        },
        absl::Now() + kTimeout, "tensor-parallel all-reduce");
    if (s.ok()) {
      s = cuda::CudaStatus(cudaStreamWaitEvent(stream, r.done.get(), 0), "cudaStreamWaitEvent");
    }
    TORCH_CHECK(s.ok(), "tensor-parallel all-reduce, rank ", rank, " on ", device, ": ",
                s.message());
    return out;
  }

  void Abort() override { aborted_ = true; }

  void End() override {
    if (aborted_) ranks_.clear();  // each communicator aborted (cuda::NcclComm)
  }

 private:
  // Makes every rank's communicator, each on a thread of its own (one
  // rank's connects only once the others' have started).
  absl::Status Connect() {
    ncclUniqueId id;
    if (absl::Status s = cuda::NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"); !s.ok()) {
      return s;
    }
    const absl::Time deadline = absl::Now() + kTimeout;
    std::vector<Rank> ranks(devices_.size());
    std::vector<absl::Status> made(devices_.size(), absl::UnknownError("not started"));
    try {
      std::vector<std::jthread> threads;
      for (size_t r = 0; r < devices_.size(); ++r) {
        threads.emplace_back(
            [&, r] { made[r] = MakeRank(id, static_cast<int>(r), deadline, ranks[r]); });
      }
    } catch (const std::exception& e) {
      return absl::ResourceExhaustedError(
          absl::StrCat("tensor-parallel all-reduce: starting a thread per rank: ", e.what()));
    }  // joined
    for (size_t r = 0; r < made.size(); ++r) {
      if (!made[r].ok()) {
        return absl::Status(made[r].code(),
                            absl::StrCat("tensor-parallel all-reduce: connecting rank ", r, " on ",
                                         devices_[r].str(), ": ", made[r].message()));
      }
    }
    ranks_ = std::move(ranks);
    return absl::OkStatus();
  }

  absl::Status MakeRank(const ncclUniqueId& id, int r, absl::Time deadline, Rank& rank) const {
    absl::StatusOr<std::unique_ptr<cuda::NcclComm>> c = cuda::NcclComm::Init(
        id, r, devices_[r].index(), deadline, static_cast<int>(devices_.size()));
    if (!c.ok()) return c.status();
    rank.comm = *std::move(c);
    // Init made the rank's device current on this thread: the events are its.
    absl::StatusOr<cuda::CudaEvent> ready = cuda::NewCudaEvent();
    absl::StatusOr<cuda::CudaEvent> done = ready.ok() ? cuda::NewCudaEvent() : ready;
    if (!done.ok()) return done.status();
    rank.ready = *std::move(ready);
    rank.done = *std::move(done);
    return absl::OkStatus();
  }

  const std::vector<torch::Device> devices_;
  std::vector<Rank> ranks_;  // empty until connected, and after an aborted forward
  std::atomic<bool> aborted_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<RankAllReduce>> NewNcclAllReduce(
    const std::vector<torch::Device>& devices) {
  std::set<int> seen;
  for (const torch::Device& d : devices) {
    const std::string where = absl::StrCat("tensor-parallel all-reduce on ", d.str(), ": ");
    if (!d.is_cuda() || !d.has_index()) {
      return absl::InvalidArgumentError(absl::StrCat(where, "expected a CUDA device and index"));
    }
    if (!seen.insert(d.index()).second) {
      return absl::InvalidArgumentError(absl::StrCat(where, "two ranks on one device"));
    }
    if (absl::Status s = cuda::CudaDeviceVisible(d.index()); !s.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(where, s.message()));
    }
  }
  return std::unique_ptr<RankAllReduce>(std::make_unique<NcclAllReduce>(devices));
}

}  // namespace trellis::model::internal
