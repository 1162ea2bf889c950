// The NCCL transport: see nccl_transport.h for the protocol.
//
// Store keys, under "nccl/slot/<k>/": "generation" (a counter the receiver
// bumps to (re)connect), "<g>/id" (the ncclUniqueId of generation g),
// "<g>/req/<n>" (int64 min_version, wait_ms) and "<g>/ans/<n>" (int64 code
// then a serialized v1::WeightsHeader, or an error message).

#include "weightsync/nccl_transport.h"

#include <ATen/ATen.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "trellis/v1/weights.pb.h"
#include "weightsync/internal/bucket_set.h"
#include "weightsync/internal/staging.h"
#include "weightsync/internal/threaded_sender.h"
#include "weightsync/internal/tcp_store.h"
#include "weightsync/internal/nccl_pair.h"
#include "weightsync/internal/wire.h"


namespace trellis::weightsync {
namespace {


using internal::BucketSet;
using internal::Stopwatch;
using internal::ToMs;
using internal::nccl::kStopGrace;
using internal::nccl::kPoll;
using internal::nccl::CudaStatus;
using internal::nccl::Key;
using internal::nccl::Int64s;
using internal::nccl::Int64At;
using internal::nccl::DeviceBytes;
using internal::nccl::Comm;
using internal::nccl::CheckEndpoint;

// ---------------------------------------------------------------- sender

struct SenderState : internal::SenderCore {
  SenderState(NcclEndpoint ep, TransportOptions options)
      : SenderCore("weightsync nccl", options.bucket_bytes), endpoint(std::move(ep)) {}

  const NcclEndpoint endpoint;
  c10::intrusive_ptr<c10d::TCPStore> server;
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
void ServeConnection(SenderState& st, c10d::TCPStore& store, int k,
                     int64_t gen, Comm& comm, DeviceSet& device) {
  for (int64_t seq = 1; !st.stopping; ++seq) {
    const std::string req_key = Key(k, gen, absl::StrCat("req/", seq));
    while (!store.check({req_key})) {
      if (store.add(Key(k, "generation"), 0) > gen) return;
      if (!st.SleepUnlessStopping(kPoll)) return;
    }
    const std::vector<uint8_t> req = store.get(req_key);
    store.deleteKey(req_key);
    absl::StatusOr<std::shared_ptr<const BucketSet>> set = st.stage.WaitFor(
        Int64At(req, 0), absl::Now() + absl::Milliseconds(Int64At(req, 1)));
    std::string body;
    int64_t code = 0;
    if (set.ok()) {
      if (absl::Status s = device.Load(**set, comm.stream()); !s.ok()) {
        set = s;
      }
    }
    if (set.ok()) {
      internal::EncodeHeader(**set).SerializeToString(&body);
    } else {
      // Closing (Cancelled here) is Unavailable to the receiver.
      code = static_cast<int64_t>(absl::IsCancelled(set.status())
                                      ? absl::StatusCode::kUnavailable
                                      : set.status().code());
      body = std::string(set.status().message());
    }
    std::vector<uint8_t> answer = Int64s({code});
    answer.insert(answer.end(), body.begin(), body.end());
    store.set(Key(k, gen, absl::StrCat("ans/", seq)), answer);
    if (!set.ok()) {
      if (absl::IsCancelled(set.status())) return;
      continue;
    }
    const double bytes = static_cast<double>((*set)->payload_bytes());
    const absl::Time deadline =
        absl::Now() + std::max(st.endpoint.connect_timeout, absl::Seconds(10)) +
        absl::Seconds(bytes / 1e9);
    if (!comm.Transfer(/*send=*/true, device.ptr, device.n, deadline).ok()) {
      return;
    }
  }
}

void ServeSlot(std::shared_ptr<SenderState> st, int k) {
  absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>> store =
      internal::ConnectStore(st->endpoint.host, st->endpoint.port,
                             /*server=*/false, st->endpoint.connect_timeout);
  DeviceSet device;
  int64_t served = 0;
  try {
    while (store.ok() && !st->stopping &&
           cudaSetDevice(st->endpoint.cuda_device) == cudaSuccess) {
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
      absl::StatusOr<std::unique_ptr<Comm>> comm =
          Comm::Init(id, 0, st->endpoint.cuda_device,
                     absl::Now() + st->endpoint.connect_timeout);
      if (!comm.ok()) continue;  // The receiver retries.
      ServeConnection(*st, **store, k, gen, **comm, device);
    }
  } catch (const std::exception&) {
    // The store is gone: the sender is closing.
  }
  absl::MutexLock lock(&st->mu);
  --st->live_threads;
}

}  // namespace

absl::Status NcclAvailable() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no usable CUDA device: cudaGetDeviceCount: ", cudaGetErrorString(e)));
  }
  if (count == 0) {
    return absl::FailedPreconditionError("no CUDA device on this machine");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Transport>> NewNcclSender(
    const NcclEndpoint& endpoint, TransportOptions options) {
  if (absl::Status s = CheckEndpoint(endpoint); !s.ok()) return s;
  if (absl::Status s = internal::CheckReceiverIndex("weightsync nccl", /*sender=*/true,
                                                 endpoint.receiver_index,
                                                 endpoint.num_receivers);
      !s.ok()) {
    return s;
  }
  auto st = std::make_shared<SenderState>(endpoint, options);
  absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>> server =
      internal::ConnectStore(endpoint.host, endpoint.port, /*server=*/true,
                             endpoint.connect_timeout);
  if (!server.ok()) return server.status();
  st->server = *std::move(server);
  const int n = endpoint.num_receivers;
  {
    absl::MutexLock lock(&st->mu);
    st->live_threads = n;
  }
  std::vector<std::thread> threads;
  for (int k = 0; k < n; ++k) threads.emplace_back(ServeSlot, st, k);
  return std::make_unique<internal::ThreadedSender>(std::move(st), std::move(threads),
                                                    "weightsync nccl", kStopGrace);
}

}  // namespace trellis::weightsync
