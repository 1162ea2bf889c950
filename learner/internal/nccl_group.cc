#include "learner/internal/nccl_group.h"

#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cuda/cuda_memory.h"
#include "cuda/nccl_pair.h"
#include "learner/internal/group_common.h"

namespace trellis::learner::internal {
namespace {

// Where rank 0 leaves NCCL's unique id for the others.
constexpr char kIdKey[] = "learner-group/nccl-id";

// The device `device` names ("cuda" alone: the current one).
torch::Device Resolved(const torch::Device& device) {
  return device.has_index() ? device : torch::Device(torch::kCUDA, c10::cuda::current_device());
}

class NcclGroup final : public MeteredGroup {
 public:
  NcclGroup(const GroupOptions& options, c10::intrusive_ptr<c10d::Store> store,
            std::unique_ptr<cuda::NcclComm> comm)
      : options_(options),
        device_(Resolved(options.device)),
        store_(std::move(store)),
        comm_(std::move(comm)) {}

  int rank() const override { return options_.member.rank; }
  int size() const override { return options_.member.size; }

  absl::Status AllReduceSum(const std::vector<torch::Tensor>& tensors) override {
    return Run(PackBuckets(tensors, {}, options_.bucket_bytes), true, "gradient all-reduce",
               [this](const torch::Tensor& buffer, const Bucket&, ncclDataType_t type) {
                 return ncclAllReduce(buffer.data_ptr(), buffer.data_ptr(), buffer.numel(), type,
                                      ncclSum, comm_->get(), comm_->stream());
               });
  }

  absl::Status Broadcast(const std::vector<torch::Tensor>& tensors,
                         const std::vector<int>& owners) override {
    if (absl::Status s = CheckOwners(options_, tensors.size(), owners.size()); !s.ok()) return s;
    return Run(PackBuckets(tensors, owners, options_.bucket_bytes), false, "parameter broadcast",
               [this](const torch::Tensor& buffer, const Bucket& bucket, ncclDataType_t type) {
                 return ncclBroadcast(buffer.data_ptr(), buffer.data_ptr(), buffer.numel(), type,
                                      bucket.owner, comm_->get(), comm_->stream());
               });
  }

  absl::Status AllReduceSum(std::vector<double>& values) override {
    return SumScalars(*this, values, device_);
  }

  absl::StatusOr<std::function<absl::Status()>> StartAllGather(
      const torch::Tensor& full, const torch::Tensor& shard) override {
    static constexpr char kWhat[] = "parameter all-gather";
    const absl::Time began = absl::Now();
    absl::StatusOr<cuda::CudaEvent> done =
        PostShards(full, shard, false, kWhat, [&](ncclDataType_t type) {
          return ncclAllGather(shard.data_ptr(), full.data_ptr(), shard.numel(), type, comm_->get(),
                               comm_->stream());
        });
    if (!done.ok()) return done.status();
    const int64_t bytes = static_cast<int64_t>(full.nbytes());
    // The waiter holds the tensors until NCCL is done with them.
    return std::function<absl::Status()>([this, done = *done, full, shard, bytes, began] {
      if (absl::Status s = Wait(done, kWhat); !s.ok()) return s;
      Moved(bytes);
      Took(began);
      return absl::OkStatus();
    });
  }

  absl::Status ReduceScatterSum(const torch::Tensor& shard, const torch::Tensor& full) override {
    static constexpr char kWhat[] = "gradient reduce-scatter";
    const absl::Time began = absl::Now();
    absl::StatusOr<cuda::CudaEvent> done =
        PostShards(full, shard, true, kWhat, [&](ncclDataType_t type) {
          return ncclReduceScatter(full.data_ptr(), shard.data_ptr(), shard.numel(), type, ncclSum,
                                   comm_->get(), comm_->stream());
        });
    if (!done.ok()) return done.status();
    if (absl::Status s = Wait(*done, kWhat); !s.ok()) return s;
    Buffered(full.nbytes());
    Moved(full.nbytes());
    Took(began);
    return absl::OkStatus();
  }

 private:
  absl::Status Error(absl::StatusCode code, const char* what, const std::string& message) const {
    return OfRank(options_, absl::Status(code, absl::StrCat(what, ": ", message)));
  }

  // InvalidArgument unless `t` is contiguous on the group's device.
  absl::Status CheckPlaced(const torch::Tensor& t, const char* what) const {
    if (t.defined() && t.device() == device_ && t.is_contiguous()) return absl::OkStatus();
    return Error(absl::StatusCode::kInvalidArgument, what,
                 absl::StrCat("a tensor ", t.defined() ? "on " + t.device().str() : "undefined",
                              ", expected one contiguous on the group's ", device_.str()));
  }

  // Queues `calls` (NCCL's, on the communicator's stream, in one group)
  // after the work queued so far on the device's current LibTorch stream;
  // returns an event recorded after them.
  template <typename Calls>
  absl::StatusOr<cuda::CudaEvent> Enqueue(Calls calls, const char* what) {
    const c10::cuda::CUDAGuard guard(device_.index());
    absl::StatusOr<cuda::CudaEvent> ready = cuda::NewCudaEvent();
    absl::StatusOr<cuda::CudaEvent> done = ready.ok() ? cuda::NewCudaEvent() : ready;
    if (!done.ok()) return Error(done.status().code(), what, std::string(done.status().message()));
    const cudaStream_t torch_stream = c10::cuda::getCurrentCUDAStream(device_.index()).stream();
    const absl::Status s = comm_->Post(torch_stream, ready->get(), done->get(), calls,
                                       absl::Now() + options_.timeout, what);
    if (!s.ok()) return OfRank(options_, s);
    return *done;
  }

  // Waits for `done` (Enqueue's) within the group's timeout.
  absl::Status Wait(const cuda::CudaEvent& done, const char* what) {
    return OfRank(options_, comm_->WaitDone([&done] { return cudaEventQuery(done.get()); },
                                            absl::Now() + options_.timeout, what));
  }

  // Checks `full` and `shard` (one dtype, contiguous on the device, full
  // size() times shard) and enqueues `call(type)` on them.
  template <typename Call>
  absl::StatusOr<cuda::CudaEvent> PostShards(const torch::Tensor& full, const torch::Tensor& shard,
                                             bool sum, const char* what, Call call) {
    for (const torch::Tensor* t : {&full, &shard}) {
      if (absl::Status s = CheckPlaced(*t, what); !s.ok()) return s;
    }
    if (full.scalar_type() != shard.scalar_type() || full.numel() != size() * shard.numel()) {
      return Error(
          absl::StatusCode::kInvalidArgument, what,
          absl::StrCat("full ", c10::toString(full.scalar_type()), " of ", full.numel(),
                       " elements, shard ", c10::toString(shard.scalar_type()), " of ",
                       shard.numel(), ": expected one dtype and ", size(), " shards in full"));
    }
    absl::StatusOr<ncclDataType_t> type = cuda::NcclType(full.scalar_type(), sum);
    if (!type.ok()) {
      return Error(type.status().code(), what, std::string(type.status().message()));
    }
    return Enqueue([&] { return cuda::NcclStatus(call(*type), what); }, what);
  }

  // Flattens every bucket, runs `call(buffer, bucket, type)` on each in one
  // NCCL group, waits for them and copies the results back.
  template <typename Call>
  absl::Status Run(const std::vector<Bucket>& buckets, bool sum, const char* what, Call call) {
    const absl::Time began = absl::Now();
    try {
      std::vector<torch::Tensor> buffers;
      std::vector<ncclDataType_t> types;
      for (const Bucket& bucket : buckets) {
        absl::StatusOr<ncclDataType_t> type =
            cuda::NcclType(bucket.tensors.front().scalar_type(), sum);
        if (!type.ok()) {
          return Error(type.status().code(), what, std::string(type.status().message()));
        }
        types.push_back(*type);
        buffers.push_back(Flatten(bucket));
        if (absl::Status s = CheckPlaced(buffers.back(), what); !s.ok()) return s;
        Buffered(bucket.bytes);
      }
      absl::StatusOr<cuda::CudaEvent> done = Enqueue(
          [&] {
            absl::Status s;
            for (size_t i = 0; s.ok() && i < buffers.size(); ++i) {
              s = cuda::NcclStatus(call(buffers[i], buckets[i], types[i]), what);
            }
            return s;
          },
          what);
      if (!done.ok()) return done.status();
      if (absl::Status s = Wait(*done, what); !s.ok()) return s;
      for (size_t i = 0; i < buffers.size(); ++i) {
        Unflatten(buffers[i], buckets[i]);
        Moved(buckets[i].bytes);
      }
    } catch (const std::exception& e) {
      return Error(absl::StatusCode::kUnavailable, what, e.what());
    }
    Took(began);
    return absl::OkStatus();
  }

  const GroupOptions options_;
  const torch::Device device_;
  // Kept for the group's lifetime, as the Gloo group keeps its own.
  c10::intrusive_ptr<c10d::Store> store_;
  std::unique_ptr<cuda::NcclComm> comm_;
};

// NCCL's unique id for the group: rank 0 draws it and leaves it in the
// store, the others wait there for it (the store's own timeout).
absl::StatusOr<ncclUniqueId> ShareId(const GroupOptions& options, c10d::Store& store) {
  ncclUniqueId id;
  try {
    if (options.member.rank == 0) {
      if (absl::Status s = cuda::NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"); !s.ok()) {
        return s;
      }
      store.set(kIdKey, std::vector<uint8_t>(id.internal, id.internal + sizeof(id.internal)));
      return id;
    }
    const std::vector<uint8_t> got = store.get(kIdKey);
    if (got.size() != sizeof(id.internal)) {
      return absl::DataLossError(absl::StrCat("the NCCL id in the store has ", got.size(),
                                              " bytes, expected ", sizeof(id.internal)));
    }
    std::copy(got.begin(), got.end(), id.internal);
    return id;
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("NCCL id through the store: ", e.what()));
  }
}

}  // namespace

absl::Status NcclGroupAvailable(const GroupOptions& options) {
  const std::string where =
      absl::StrCat(options.worker_id, ": learner group on ", options.device.str(), ": ");
  // "cuda" alone: the current device, which a visible device 0 means there is.
  const absl::Status s =
      cuda::CudaDeviceVisible(options.device.has_index() ? options.device.index() : 0);
  if (s.ok()) return s;
  return absl::FailedPreconditionError(absl::StrCat(where, s.message()));
}

absl::StatusOr<std::unique_ptr<DataParallelGroup>> JoinNcclGroup(
    const GroupOptions& options, c10::intrusive_ptr<c10d::Store> store) {
  const absl::Time deadline = absl::Now() + options.timeout;
  absl::StatusOr<ncclUniqueId> id = ShareId(options, *store);
  if (!id.ok()) return id.status();
  const torch::Device device = Resolved(options.device);
  absl::StatusOr<std::unique_ptr<cuda::NcclComm>> comm =
      cuda::NcclComm::Init(*id, options.member.rank, device.index(), deadline, options.member.size);
  if (!comm.ok()) return comm.status();
  return std::unique_ptr<DataParallelGroup>(
      std::make_unique<NcclGroup>(options, std::move(store), *std::move(comm)));
}

}  // namespace trellis::learner::internal
