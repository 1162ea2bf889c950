// The NCCL transport: see nccl_transport.h for the protocol.
//
// Store keys, under "nccl/slot/<k>/": "generation" (a counter the receiver
// bumps to (re)connect), "<g>/id" (the ncclUniqueId of generation g),
// "<g>/req/<n>" (int64 min_version, wait_ms) and "<g>/ans/<n>" (int64 code
// then a serialized v1::WeightsHeader, or an error message).

#include "weightsync/nccl_transport.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <exception>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "cuda/nccl_pair.h"
#include "comm/tcp_store.h"
#include "trellis/v1/weights.pb.h"
#include "weightsync/internal/bucket_set.h"
#include "weightsync/internal/nccl_protocol.h"
#include "weightsync/internal/staging.h"
#include "weightsync/internal/store_protocol.h"
#include "weightsync/internal/threaded_sender.h"
#include "weightsync/internal/wire.h"
#include "weightsync/registry.h"

// In the protocol's namespace (internal/nccl_protocol.h), for its names.
namespace trellis::weightsync::internal::nccl {
namespace {

using cuda::CudaStatus;
using cuda::DeviceBytes;
using cuda::NcclComm;

struct SenderState : SenderCore {
  explicit SenderState(const TransportOptions& options)
      : SenderCore(kName, options.bucket_bytes), options(options) {}

  const TransportOptions options;
};

// The device copy of the version being served, kept while it is newest.
struct DeviceSet {
  int64_t version = -1;
  std::vector<DeviceBytes> buckets;
  std::vector<void*> ptr;
  std::vector<size_t> n;

  absl::Status Load(const BucketSet& set, cudaStream_t stream) {
    if (set.version == version) return absl::OkStatus();
    version = -1;
    if (buckets.size() < set.buckets.size()) {
      buckets = std::vector<DeviceBytes>(set.buckets.size());
    }
    ptr.clear();
    n.clear();
    for (size_t i = 0; i < set.buckets.size(); ++i) {
      const size_t bytes = static_cast<size_t>(set.buckets[i].numel());
      if (absl::Status s = buckets[i].Reserve(std::max<size_t>(bytes, 1));
          !s.ok()) {
        return s;
      }
      if (absl::Status s = CudaStatus(
              cudaMemcpyAsync(buckets[i].data(), set.buckets[i].data_ptr(),
                              bytes, cudaMemcpyHostToDevice, stream),
              "copying a bucket to the device");
          !s.ok()) {
        return s;
      }
      ptr.push_back(buckets[i].data());
      n.push_back(bytes);
    }
    if (absl::Status s =
            CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
        !s.ok()) {
      return s;
    }
    version = set.version;
    return absl::OkStatus();
  }
};

// Serves one receiver connection (generation `gen`) until it fails, the
// receiver reconnects or the sender stops.
void ServeConnection(SenderState& st, c10d::Store& store, int k,
                     int64_t gen, NcclComm& comm, DeviceSet& device) {
  for (int64_t seq = 1; !st.stopping; ++seq) {
    const std::string req_key = Key(k, gen, absl::StrCat("req/", seq));
    while (!store.check({req_key})) {
      if (store.add(Key(k, "generation"), 0) > gen) return;
      if (!st.SleepUnlessStopping(kPoll)) return;
    }
    const std::vector<uint8_t> req = store.get(req_key);
    store.deleteKey(req_key);
    absl::StatusOr<std::shared_ptr<const BucketSet>> set =
        st.stage.WaitFor(Int64At(req, 0), absl::Now() + absl::Milliseconds(Int64At(req, 1)));
    if (set.ok()) {
      if (absl::Status s = device.Load(**set, comm.stream()); !s.ok()) set = s;
    }
    std::string body;
    if (set.ok()) EncodeHeader(**set).SerializeToString(&body);
    store.set(Key(k, gen, absl::StrCat("ans/", seq)), EncodeAnswer(set.status(), body));
    if (!set.ok()) {
      if (absl::IsCancelled(set.status())) return;
      continue;
    }
    const double bytes = static_cast<double>((*set)->payload_bytes());
    const absl::Time deadline =
        absl::Now() + std::max(st.options.connect_timeout, absl::Seconds(10)) +
        absl::Seconds(bytes / 1e9);
    if (!comm.Transfer(/*send=*/true, device.ptr, device.n, deadline).ok()) {
      return;
    }
  }
}

void ServeSlot(std::shared_ptr<SenderState> st, int k) {
  absl::StatusOr<c10::intrusive_ptr<c10d::Store>> store = comm::ConnectStore(
      st->options.host, st->options.port, /*server=*/false, st->options.connect_timeout,
      st->options.secret);
  DeviceSet device;
  int64_t served = 0;
  try {
    while (store.ok() && !st->stopping &&
           cudaSetDevice(st->options.cuda_device) == cudaSuccess) {
      const int64_t gen = (*store)->add(Key(k, "generation"), 0);
      if (gen <= served) {
        st->SleepUnlessStopping(absl::Milliseconds(5));
        continue;
      }
      served = gen;
      ncclUniqueId id;
      if (ncclGetUniqueId(&id) != ncclSuccess) continue;
      (*store)->set(Key(k, gen, "id"),
                    std::vector<uint8_t>(id.internal,
                                         id.internal + sizeof(id.internal)));
      absl::StatusOr<std::unique_ptr<NcclComm>> comm =
          NcclComm::Init(id, 0, st->options.cuda_device,
                     absl::Now() + st->options.connect_timeout);
      if (!comm.ok()) continue;  // The receiver retries.
      ServeConnection(*st, **store, k, gen, **comm, device);
    }
  } catch (const std::exception&) {
    // The store is gone: the sender is closing.
  }
  absl::MutexLock lock(&st->mu);
  --st->live_threads;
}

absl::StatusOr<std::unique_ptr<Publisher>> StartPublisher(const TransportOptions& options) {
  auto st = std::make_shared<SenderState>(options);
  if (absl::Status s = HostStore(kName, options, *st); !s.ok()) return s;
  return StartSlotThreads(std::move(st), options.num_receivers, ServeSlot, kStopGrace);
}

}  // namespace
}  // namespace trellis::weightsync::internal::nccl

namespace trellis::weightsync {

absl::Status NcclAvailable() { return cuda::CudaDeviceAvailable(); }

absl::StatusOr<std::unique_ptr<Publisher>> NewNcclPublisher(const TransportOptions& options) {
  return internal::nccl::StartPublisher(options);
}

absl::Status RegisterNcclTransport(TransportRegistry& registry) {
  return registry.Register("nccl", NewNcclPublisher, NewNcclReceiver);
}

}  // namespace trellis::weightsync
