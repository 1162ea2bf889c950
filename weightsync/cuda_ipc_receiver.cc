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
#include "cuda/cuda_memory.h"
#include "weightsync/cuda_ipc_transport.h"
#include "weightsync/internal/bucket_set.h"
#include "weightsync/internal/cuda_ipc_device.h"
#include "weightsync/internal/cuda_ipc_protocol.h"
#include "weightsync/internal/staging.h"
#include "weightsync/internal/store_receiver.h"
#include "weightsync/internal/threaded_sender.h"

// In the protocol's namespace (internal/cuda_ipc_protocol.h), for its names.
namespace trellis::weightsync::internal::cuda_ipc {
namespace {

using cuda::CudaStatus;

class CudaIpcReceiver final : public StoreReceiver {
 public:
  explicit CudaIpcReceiver(const TransportOptions& options)
      : StoreReceiver(kName, {Key, Key}, kAnswerGrace, options) {}

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
      store_->set(Key(options_.receiver_index, gen_, absl::StrCat("done/", seq_)),
                  std::vector<uint8_t>{});
    } catch (const std::exception&) {
      // The publisher is gone; the next request finds out.
    }
  }

  absl::StatusOr<Fetched> Fetch(int64_t min_version, absl::Time deadline, bool* in_step) override {
    absl::StatusOr<std::string> body = Ask(min_version, deadline, in_step);
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

  bool Linked() const override { return static_cast<bool>(store_); }

  absl::Status Link(absl::Time deadline) override {
    absl::StatusOr<DeviceUuid> device = DeviceUuidOf(options_.cuda_device);
    if (!device.ok()) return device.status();
    device_ = *device;
    return ConnectStore(deadline);
  }

  DeviceUuid device_ ABSL_GUARDED_BY(mu_){};
  std::map<std::string, Opened> opened_ ABSL_GUARDED_BY(mu_);
};

}  // namespace
}  // namespace trellis::weightsync::internal::cuda_ipc

namespace trellis::weightsync {

absl::StatusOr<std::unique_ptr<Receiver>> NewCudaIpcReceiver(const TransportOptions& options) {
  return internal::NewSlotReceiver<internal::cuda_ipc::CudaIpcReceiver>(internal::cuda_ipc::kName,
                                                                        options);
}

}  // namespace trellis::weightsync
