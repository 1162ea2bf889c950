// The receiving end of the CUDA IPC transport (weightsync/cuda_ipc_transport.h).

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <exception>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/cuda_memory.h"
#include "comm/tcp_store.h"
#include "weightsync/cuda_ipc_transport.h"
#include "weightsync/internal/bucket_set.h"
#include "weightsync/internal/cuda_ipc_device.h"
#include "weightsync/internal/cuda_ipc_protocol.h"
#include "weightsync/internal/pull_receiver.h"
#include "weightsync/internal/staging.h"
#include "weightsync/internal/store_protocol.h"
#include "weightsync/internal/threaded_sender.h"

// In the protocol's namespace (internal/cuda_ipc_protocol.h), for its names.
namespace trellis::weightsync::internal::cuda_ipc {
namespace {

using comm::CudaStatus;

class CudaIpcReceiver final : public PullReceiver {
 public:
  explicit CudaIpcReceiver(const TransportOptions& options)
      : PullReceiver(absl::StrCat(kName, " receiver ", options.receiver_index),
                     absl::StrCat(options.host, ":", options.port)),
        options_(options) {}

  ~CudaIpcReceiver() override {
    absl::MutexLock lock(&mu_);
    CloseHandles(/*keep_from=*/-1);
  }

 private:
  // A publisher's bucket mapped into this process.
  struct Opened {
    void* ptr = nullptr;
    int64_t last_seq = 0;  // The last request whose answer named it.
    bool own = false;      // Opened here (closed here), not the publisher's own address.
  };

  void Disconnect() override {
    CloseHandles(/*keep_from=*/-1);
    store_.reset();
  }

  void GiveBack() override {
    // The copies into dst run on LibTorch's current stream: finished before
    // the publisher may reuse the buckets.
    c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(options_.cuda_device))
        .synchronize();
    SayDone();
  }

  void SayDone() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    try {
      store_->set(Key(options_.receiver_index, gen_, absl::StrCat("done/", seq_)), {});
    } catch (const std::exception&) {
      // The publisher is gone; the next request finds out.
    }
  }

  absl::StatusOr<Fetched> Fetch(int64_t min_version, absl::Time deadline, bool* in_step) override {
    const int slot = options_.receiver_index;
    try {
      if (!store_) {
        if (absl::Status s = Connect(deadline); !s.ok()) return s;
      }
    } catch (const std::exception& e) {
      return StoreError(e);
    }
    ++seq_;
    absl::StatusOr<std::string> body = AskForVersion(
        *store_, Key(slot, gen_, absl::StrCat("req/", seq_)),
        Key(slot, gen_, absl::StrCat("ans/", seq_)), min_version, deadline, kAnswerGrace, in_step);
    if (!body.ok()) return body.status();
    // An announcement: the publisher keeps its buckets until done.
    Stopwatch transfer;
    absl::StatusOr<BucketSet> set = Map(*body);
    if (!set.ok()) {
      SayDone();
      *in_step = !absl::IsInternal(set.status());
      return set.status();
    }
    return Fetched{*std::move(set), transfer.Seconds(), absl::OkStatus(), /*borrowed=*/true};
  }

  // The announced set, its buckets the publisher's device memory.
  // DataLoss for a malformed announcement, FailedPrecondition for another
  // GPU's, Internal when CUDA cannot map a bucket.
  absl::StatusOr<BucketSet> Map(const std::string& body) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::StatusOr<Announcement> a = DecodeAnnouncement(body);
    if (!a.ok()) return a.status();
    absl::StatusOr<BucketSet> set = AnnouncedLayout(*a);
    if (!set.ok()) return set.status();
    if (a->device != device_) {
      return absl::FailedPreconditionError(absl::StrCat(
          kName, ": the publisher's GPU ", UuidString(a->device), " is not this receiver's (",
          "cuda_device ", options_.cuda_device, ", ", UuidString(device_),
          "): CUDA IPC moves weights within one GPU; between GPUs use nccl"));
    }
    if (absl::Status s = CudaStatus(cudaSetDevice(options_.cuda_device), "cudaSetDevice");
        !s.ok()) {
      return s;
    }
    const bool same_process = a->process_nonce == ProcessNonce();
    const at::TensorOptions bytes =
        at::TensorOptions().dtype(at::kByte).device(at::kCUDA, options_.cuda_device);
    for (size_t i = 0; i < a->buckets.size(); ++i) {
      const DeviceBucket& b = a->buckets[i];
      const std::string handle(b.handle.begin(), b.handle.end());
      auto it = opened_.find(handle);
      if (it == opened_.end()) {
        Opened o;
        if (same_process) {
          o.ptr = reinterpret_cast<void*>(b.address);
        } else {
          cudaIpcMemHandle_t h;
          std::copy(b.handle.begin(), b.handle.end(), std::begin(h.reserved));
          if (absl::Status s =
                  CudaStatus(cudaIpcOpenMemHandle(&o.ptr, h, cudaIpcMemLazyEnablePeerAccess),
                             "cudaIpcOpenMemHandle");
              !s.ok()) {
            return s;
          }
          o.own = true;
        }
        it = opened_.emplace(handle, o).first;
      }
      it->second.last_seq = seq_;
      set->buckets.push_back(at::from_blob(
          it->second.ptr, {a->header.bucket_bytes(static_cast<int>(i))}, [](void*) {}, bytes));
    }
    // Buckets the publisher announced neither now nor last time are gone.
    CloseHandles(/*keep_from=*/seq_ - 1);
    return set;
  }

  // Closes the handles last named before request `keep_from` (all of them
  // for a negative one).
  void CloseHandles(int64_t keep_from) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto it = opened_.begin(); it != opened_.end();) {
      if (keep_from >= 0 && it->second.last_seq >= keep_from) {
        ++it;
        continue;
      }
      if (it->second.own) cudaIpcCloseMemHandle(it->second.ptr);
      it = opened_.erase(it);
    }
  }

  absl::Status Connect(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::StatusOr<DeviceUuid> device = DeviceUuidOf(options_.cuda_device);
    if (!device.ok()) return device.status();
    device_ = *device;
    if (absl::Status s = comm::WaitForListener(options_.host, options_.port, deadline); !s.ok()) {
      return s;
    }
    absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>> store =
        comm::ConnectStore(options_.host, options_.port, /*server=*/false,
                           std::min(deadline - absl::Now(), options_.connect_timeout));
    if (!store.ok()) return store.status();
    store_ = *std::move(store);
    gen_ = store_->add(Key(options_.receiver_index, "generation"), 1);
    seq_ = 0;
    return absl::OkStatus();
  }

  const TransportOptions options_;
  c10::intrusive_ptr<c10d::TCPStore> store_ ABSL_GUARDED_BY(mu_);
  DeviceUuid device_ ABSL_GUARDED_BY(mu_){};
  std::map<std::string, Opened> opened_ ABSL_GUARDED_BY(mu_);
  int64_t gen_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t seq_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace
}  // namespace trellis::weightsync::internal::cuda_ipc

namespace trellis::weightsync {

absl::StatusOr<std::unique_ptr<Receiver>> NewCudaIpcReceiver(const TransportOptions& options) {
  return internal::NewSlotReceiver<internal::cuda_ipc::CudaIpcReceiver>(internal::cuda_ipc::kName,
                                                                        options);
}

}  // namespace trellis::weightsync
