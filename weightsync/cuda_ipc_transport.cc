// The publishing end of the CUDA IPC transport: see cuda_ipc_transport.h
// for the protocol, internal/cuda_ipc_protocol.h for the store keys.

#include "weightsync/cuda_ipc_transport.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <exception>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "cuda/cuda_memory.h"
#include "comm/tcp_store.h"
#include "weightsync/internal/bucket_set.h"
#include "weightsync/internal/cuda_ipc_device.h"
#include "weightsync/internal/cuda_ipc_protocol.h"
#include "weightsync/internal/staging.h"
#include "weightsync/internal/store_protocol.h"
#include "weightsync/internal/threaded_sender.h"
#include "weightsync/internal/wire.h"
#include "weightsync/registry.h"

// In the protocol's namespace (internal/cuda_ipc_protocol.h), for its names.
namespace trellis::weightsync::internal::cuda_ipc {
namespace {

using cuda::CudaStatus;
using cuda::DeviceBytes;

// One version's device buckets and what announces them.
struct DeviceSet {
  int64_t version = -1;
  std::vector<std::unique_ptr<DeviceBytes>> memory;
  std::vector<DeviceBucket> buckets;  // Handle and address of each.
};

// The publisher's device copies of its versions. A set shared beyond the
// pool (a receiver still reads it) is never rewritten; a free one is
// reused for the next version, so its handles stay valid.
class DevicePool {
 public:
  explicit DevicePool(int device) : device_(device) {}
  ~DevicePool() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // The device copy of `set`, made once per version after its host
  // buckets passed their checksums (DataLoss naming the bucket otherwise).
  absl::StatusOr<std::shared_ptr<const DeviceSet>> Acquire(const BucketSet& set) {
    absl::MutexLock lock(&mu_);
    for (const std::shared_ptr<DeviceSet>& d : sets_) {
      if (d->version == set.version) return std::shared_ptr<const DeviceSet>(d);
    }
    if (absl::Status s = VerifyChecksums(set); !s.ok()) return s;
    std::shared_ptr<DeviceSet> target;
    for (const std::shared_ptr<DeviceSet>& d : sets_) {
      if (d.use_count() == 1) target = d;
    }
    if (target == nullptr) target = sets_.emplace_back(std::make_shared<DeviceSet>());
    if (absl::Status s = Load(set, *target); !s.ok()) return s;
    // Free sets beyond one spare are released.
    bool spare = false;
    sets_.erase(std::remove_if(sets_.begin(), sets_.end(),
                               [&](const std::shared_ptr<DeviceSet>& d) {
                                 if (d == target || d.use_count() > 1) return false;
                                 if (spare) return true;
                                 spare = true;
                                 return false;
                               }),
                sets_.end());
    return std::shared_ptr<const DeviceSet>(target);
  }

 private:
  absl::Status Load(const BucketSet& set, DeviceSet& d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    d.version = -1;
    if (absl::Status s = CudaStatus(cudaSetDevice(device_), "cudaSetDevice"); !s.ok()) return s;
    if (stream_ == nullptr) {
      if (absl::Status s = CudaStatus(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                                      "cudaStreamCreate");
          !s.ok()) {
        return s;
      }
    }
    d.memory.resize(std::max(d.memory.size(), set.buckets.size()));
    d.buckets.resize(set.buckets.size());
    for (size_t i = 0; i < set.buckets.size(); ++i) {
      if (d.memory[i] == nullptr) d.memory[i] = std::make_unique<DeviceBytes>();
      const size_t bytes = static_cast<size_t>(set.buckets[i].numel());
      if (absl::Status s = d.memory[i]->Reserve(std::max<size_t>(bytes, 1)); !s.ok()) return s;
      const auto address = reinterpret_cast<uint64_t>(d.memory[i]->data());
      if (d.buckets[i].address != address) {
        cudaIpcMemHandle_t handle;
        if (absl::Status s = CudaStatus(cudaIpcGetMemHandle(&handle, d.memory[i]->data()),
                                        "cudaIpcGetMemHandle");
            !s.ok()) {
          return s;
        }
        static_assert(sizeof(handle.reserved) == kHandleBytes);
        std::copy(std::begin(handle.reserved), std::end(handle.reserved),
                  d.buckets[i].handle.begin());
        d.buckets[i].address = address;
      }
      if (absl::Status s =
              CudaStatus(cudaMemcpyAsync(d.memory[i]->data(), set.buckets[i].data_ptr(), bytes,
                                         cudaMemcpyHostToDevice, stream_),
                         "copying a bucket to the device");
          !s.ok()) {
        return s;
      }
    }
    // Complete before any receiver hears of it.
    if (absl::Status s = CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
        !s.ok()) {
      return s;
    }
    d.version = set.version;
    return absl::OkStatus();
  }

  const int device_;
  absl::Mutex mu_;
  std::vector<std::shared_ptr<DeviceSet>> sets_ ABSL_GUARDED_BY(mu_);
  cudaStream_t stream_ ABSL_GUARDED_BY(mu_) = nullptr;
};

struct SenderState : SenderCore {
  SenderState(const TransportOptions& options, DeviceUuid device)
      : SenderCore(kName, options.bucket_bytes),
        options(options),
        device(device),
        pool(options.cuda_device) {}

  const TransportOptions options;
  const DeviceUuid device;
  DevicePool pool;
};

// Waits for `key` until `deadline`; false once the receiver reconnected
// (generation past `gen`), the sender stops or the deadline passes.
bool AwaitKey(SenderState& st, c10d::Store& store, int k, int64_t gen, const std::string& key,
              absl::Time deadline) {
  while (!store.check({key})) {
    if (store.add(Key(k, "generation"), 0) > gen || absl::Now() >= deadline) return false;
    if (!st.SleepUnlessStopping(kPoll)) return false;
  }
  return true;
}

// Serves one receiver connection (generation `gen`) until it fails, the
// receiver reconnects or the sender stops. A device set whose reader did
// not say done in time is left in `unread`.
void ServeConnection(SenderState& st, c10d::Store& store, int k, int64_t gen,
                     std::shared_ptr<const DeviceSet>& unread) {
  for (int64_t seq = 1; !st.stopping; ++seq) {
    const std::string req_key = Key(k, gen, absl::StrCat("req/", seq));
    if (!AwaitKey(st, store, k, gen, req_key, absl::InfiniteFuture())) return;
    const std::vector<uint8_t> req = store.get(req_key);
    store.deleteKey(req_key);
    absl::StatusOr<std::shared_ptr<const BucketSet>> set =
        st.stage.WaitFor(Int64At(req, 0), absl::Now() + absl::Milliseconds(Int64At(req, 1)));
    std::shared_ptr<const DeviceSet> device;
    if (set.ok()) {
      absl::StatusOr<std::shared_ptr<const DeviceSet>> d = st.pool.Acquire(**set);
      if (d.ok()) {
        device = *std::move(d);
      } else {
        set = d.status();
      }
    }
    std::string body;
    if (set.ok()) {
      body = EncodeAnnouncement(
          Announcement{ProcessNonce(), st.device, device->buckets, EncodeHeader(**set)});
    }
    store.set(Key(k, gen, absl::StrCat("ans/", seq)), EncodeAnswer(set.status(), body));
    if (!set.ok()) {
      if (absl::IsCancelled(set.status())) return;
      continue;
    }
    const double bytes = static_cast<double>((*set)->payload_bytes());
    const absl::Time deadline = absl::Now() +
                                std::max(st.options.connect_timeout, absl::Seconds(10)) +
                                absl::Seconds(bytes / 1e9);
    const std::string done_key = Key(k, gen, absl::StrCat("done/", seq));
    if (!AwaitKey(st, store, k, gen, done_key, deadline)) {
      unread = std::move(device);
      return;
    }
    store.deleteKey(done_key);
  }
}

void ServeSlot(std::shared_ptr<SenderState> st, int k) {
  absl::StatusOr<c10::intrusive_ptr<c10d::Store>> store = comm::ConnectStore(
      st->options.host, st->options.port, /*server=*/false, st->options.connect_timeout,
      st->options.secret);
  int64_t served = 0;
  // Kept until the receiver reconnects: it may still read it.
  std::shared_ptr<const DeviceSet> unread;
  try {
    while (store.ok() && !st->stopping) {
      const int64_t gen = (*store)->add(Key(k, "generation"), 0);
      if (gen <= served) {
        st->SleepUnlessStopping(absl::Milliseconds(5));
        continue;
      }
      served = gen;
      unread.reset();
      ServeConnection(*st, **store, k, gen, unread);
    }
  } catch (const std::exception&) {
    // The store is gone: the sender is closing.
  }
  absl::MutexLock lock(&st->mu);
  --st->live_threads;
}

absl::StatusOr<std::unique_ptr<Publisher>> StartPublisher(const TransportOptions& options) {
  if (absl::Status s = CheckSlotOptions(kName, options, /*publisher=*/true); !s.ok()) return s;
  absl::StatusOr<DeviceUuid> device = DeviceUuidOf(options.cuda_device);
  if (!device.ok()) return device.status();
  auto st = std::make_shared<SenderState>(options, *device);
  if (absl::Status s = HostStore(kName, options, *st); !s.ok()) return s;
  return StartSlotThreads(std::move(st), options.num_receivers, ServeSlot, kStopGrace);
}

}  // namespace
}  // namespace trellis::weightsync::internal::cuda_ipc

namespace trellis::weightsync {

absl::Status CudaIpcAvailable() { return cuda::CudaDeviceAvailable(); }

absl::StatusOr<std::unique_ptr<Publisher>> NewCudaIpcPublisher(const TransportOptions& options) {
  return internal::cuda_ipc::StartPublisher(options);
}

absl::Status RegisterCudaIpcTransport(TransportRegistry& registry) {
  return registry.Register("cuda_ipc", NewCudaIpcPublisher, NewCudaIpcReceiver);
}

}  // namespace trellis::weightsync
