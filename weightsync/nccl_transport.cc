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
#include "weightsync/internal/tcp_store.h"
#include "weightsync/internal/wire.h"

namespace trellis::weightsync {
namespace {

using internal::BucketSet;
using internal::Stopwatch;
using internal::ToMs;

constexpr absl::Duration kAnswerGrace = absl::Milliseconds(500);
constexpr absl::Duration kStopGrace = absl::Seconds(3);
constexpr absl::Duration kPoll = absl::Milliseconds(2);

absl::Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("weightsync nccl: ", what, ": ",
                                          cudaGetErrorString(e)));
}

absl::Status NcclStatus(ncclResult_t r, const char* what) {
  if (r == ncclSuccess || r == ncclInProgress) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("weightsync nccl: ", what, ": ",
                                             ncclGetErrorString(r)));
}

std::string Key(int slot, const std::string& what) {
  return absl::StrCat("nccl/slot/", slot, "/", what);
}
std::string Key(int slot, int64_t gen, const std::string& what) {
  return absl::StrCat("nccl/slot/", slot, "/", gen, "/", what);
}

std::vector<uint8_t> Int64s(std::initializer_list<int64_t> v) {
  std::vector<uint8_t> out(v.size() * sizeof(int64_t));
  std::memcpy(out.data(), std::data(v), out.size());
  return out;
}

int64_t Int64At(const std::vector<uint8_t>& b, size_t i) {
  int64_t v = 0;
  if (b.size() >= (i + 1) * sizeof(int64_t)) {
    std::memcpy(&v, b.data() + i * sizeof(int64_t), sizeof(v));
  }
  return v;
}

// Device memory that only grows.
class DeviceBytes {
 public:
  DeviceBytes() = default;
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  ~DeviceBytes() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  absl::Status Reserve(size_t n) {
    if (n <= size_) return absl::OkStatus();
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    size_ = 0;
    if (absl::Status s = CudaStatus(cudaMalloc(&ptr_, n), "cudaMalloc");
        !s.ok()) {
      return s;
    }
    size_ = n;
    return absl::OkStatus();
  }
  void* data() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
  size_t size_ = 0;
};

// A two-rank, non-blocking communicator and its stream. Destruction
// aborts, which never waits on the peer.
class Comm {
 public:
  static absl::StatusOr<std::unique_ptr<Comm>> Init(const ncclUniqueId& id,
                                                    int rank, int device,
                                                    absl::Time deadline) {
    auto c = std::unique_ptr<Comm>(new Comm());
    if (absl::Status s = CudaStatus(cudaSetDevice(device), "cudaSetDevice");
        !s.ok()) {
      return s;
    }
    if (absl::Status s = CudaStatus(
            cudaStreamCreateWithFlags(&c->stream_, cudaStreamNonBlocking),
            "cudaStreamCreate");
        !s.ok()) {
      return s;
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    if (absl::Status s = NcclStatus(
            ncclCommInitRankConfig(&c->comm_, 2, id, rank, &config),
            "ncclCommInitRankConfig");
        !s.ok()) {
      return s;
    }
    if (absl::Status s = c->WaitReady(deadline, "connecting"); !s.ok()) {
      return s;
    }
    return c;
  }

  ~Comm() {
    if (comm_ != nullptr) ncclCommAbort(comm_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // Sends (rank 0) or receives (rank 1) `n[i]` bytes at `ptr[i]`, all in
  // one group, and waits for the stream until `deadline`.
  absl::Status Transfer(bool send, const std::vector<void*>& ptr,
                        const std::vector<size_t>& n, absl::Time deadline) {
    const int peer = send ? 1 : 0;
    absl::Status s = NcclStatus(ncclGroupStart(), "ncclGroupStart");
    for (size_t i = 0; s.ok() && i < ptr.size(); ++i) {
      if (n[i] == 0) continue;
      s = send ? NcclStatus(ncclSend(ptr[i], n[i], ncclUint8, peer, comm_,
                                     stream_),
                            "ncclSend")
               : NcclStatus(ncclRecv(ptr[i], n[i], ncclUint8, peer, comm_,
                                     stream_),
                            "ncclRecv");
    }
    absl::Status end = NcclStatus(ncclGroupEnd(), "ncclGroupEnd");
    if (!s.ok()) return s;
    if (!end.ok()) return end;
    if (absl::Status r = WaitReady(deadline, "posting"); !r.ok()) return r;
    while (true) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return absl::OkStatus();
      if (e != cudaErrorNotReady) return CudaStatus(e, "cudaStreamQuery");
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        return NcclStatus(async, send ? "sending" : "receiving");
      }
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "weightsync nccl: ", send ? "sending" : "receiving",
            " did not finish in time"));
      }
      absl::SleepFor(absl::Microseconds(100));
    }
  }

  cudaStream_t stream() const { return stream_; }

 private:
  Comm() = default;

  absl::Status WaitReady(absl::Time deadline, const char* what) {
    while (true) {
      ncclResult_t state = ncclSuccess;
      if (absl::Status s = NcclStatus(ncclCommGetAsyncError(comm_, &state),
                                      "ncclCommGetAsyncError");
          !s.ok()) {
        return s;
      }
      if (state == ncclSuccess) return absl::OkStatus();
      if (state != ncclInProgress) return NcclStatus(state, what);
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("weightsync nccl: ", what, " timed out"));
      }
      absl::SleepFor(absl::Milliseconds(1));
    }
  }

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

// ---------------------------------------------------------------- sender

struct SenderState {
  SenderState(NcclEndpoint ep, TransportOptions options)
      : endpoint(std::move(ep)),
        stage("weightsync nccl", options.bucket_bytes) {}

  const NcclEndpoint endpoint;
  internal::VersionStage stage;
  c10::intrusive_ptr<c10d::TCPStore> server;
  std::atomic<bool> stopping{false};
  absl::Mutex mu;
  int live_threads ABSL_GUARDED_BY(mu) = 0;
};

bool SleepUnlessStopping(SenderState& st, absl::Duration d) {
  absl::MutexLock lock(&st.mu);
  st.mu.AwaitWithTimeout(
      absl::Condition(
          +[](std::atomic<bool>* s) { return s->load(); }, &st.stopping),
      d);
  return !st.stopping;
}

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
      if (!SleepUnlessStopping(st, kPoll)) return;
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
        SleepUnlessStopping(*st, absl::Milliseconds(5));
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

class NcclSender final : public Transport, public internal::StagedSender {
 public:
  explicit NcclSender(std::shared_ptr<SenderState> st) : st_(std::move(st)) {
    const int n = st_->endpoint.num_receivers;
    {
      absl::MutexLock lock(&st_->mu);
      st_->live_threads = n;
    }
    for (int k = 0; k < n; ++k) threads_.emplace_back(ServeSlot, st_, k);
  }

  ~NcclSender() override {
    st_->stopping = true;
    st_->stage.Close();
    {
      absl::MutexLock lock(&st_->mu);
      auto done = +[](int* live) { return *live == 0; };
      st_->mu.AwaitWithTimeout(absl::Condition(done, &st_->live_threads),
                               kStopGrace);
      if (st_->live_threads != 0) {
        for (std::thread& t : threads_) t.detach();
        threads_.clear();
      }
    }
    for (std::thread& t : threads_) t.join();
  }

  absl::StatusOr<v1::WeightSyncStats> Publish(
      int64_t version, const NamedTensors& tensors) override {
    return st_->stage.Stage(version, tensors);
  }

  absl::StatusOr<v1::WeightSyncStats> Receive(int64_t, const NamedTensors&,
                                              absl::Duration) override {
    return absl::UnimplementedError(
        "weightsync nccl: Receive on the sending end");
  }

  internal::VersionStage* stage() override { return &st_->stage; }

 private:
  std::shared_ptr<SenderState> st_;
  std::vector<std::thread> threads_;
};

// -------------------------------------------------------------- receiver

class NcclReceiver final : public Transport {
 public:
  explicit NcclReceiver(NcclEndpoint ep) : ep_(std::move(ep)) {}

  absl::StatusOr<v1::WeightSyncStats> Publish(int64_t,
                                              const NamedTensors&) override {
    return absl::UnimplementedError(
        "weightsync nccl: Publish on a receiving end");
  }

  absl::StatusOr<v1::WeightSyncStats> Receive(int64_t min_version,
                                              const NamedTensors& dst,
                                              absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    const absl::Time start = absl::Now();
    const absl::Time deadline = start + timeout;
    auto fail = [&](const absl::Status& s) {
      comm_.reset();
      store_.reset();
      const std::string what = absl::StrCat(
          "weightsync nccl receiver ", ep_.receiver_index, ": waited ",
          absl::FormatDuration(absl::Now() - start),
          " for weights version >= ", min_version, " from ", ep_.host, ":",
          ep_.port, ": ", s.message());
      if (absl::IsDeadlineExceeded(s) || absl::Now() >= deadline) {
        return absl::DeadlineExceededError(what);
      }
      return absl::Status(s.code(), what);
    };
    std::vector<uint8_t> answer;
    try {
      if (!comm_) {
        if (absl::Status s = Connect(deadline); !s.ok()) return fail(s);
      }
      ++seq_;
      const absl::Duration left =
          std::max(deadline - absl::Now(), absl::ZeroDuration());
      store_->set(Key(ep_.receiver_index, gen_, absl::StrCat("req/", seq_)),
                  Int64s({min_version, absl::ToInt64Milliseconds(left)}));
      const std::string ans_key =
          Key(ep_.receiver_index, gen_, absl::StrCat("ans/", seq_));
      store_->wait({ans_key}, ToMs(left + kAnswerGrace));
      answer = store_->get(ans_key);
      store_->deleteKey(ans_key);
    } catch (const std::exception& e) {
      const std::string msg = e.what();
      return fail(msg.find("imeout") != std::string::npos ||
                          msg.find("timed out") != std::string::npos
                      ? absl::DeadlineExceededError("no answer in time")
                      : absl::UnavailableError(msg));
    }
    const int64_t code = Int64At(answer, 0);
    const std::string body(
        answer.begin() + std::min<size_t>(answer.size(), 8), answer.end());
    if (code != 0) return absl::Status(static_cast<absl::StatusCode>(code), body);
    v1::WeightsHeader header;
    if (!header.ParseFromString(body)) {
      return fail(absl::DataLossError("the sender's header does not parse"));
    }
    Stopwatch transfer;
    absl::StatusOr<BucketSet> set = internal::DecodeHeader(header, &spare_);
    if (!set.ok()) return fail(set.status());
    if (absl::Status s = ReceiveBuckets(*set, deadline); !s.ok()) {
      return fail(s);
    }
    spare_ = set->buckets;
    if (absl::Status s = internal::VerifyChecksums(*set); !s.ok()) return s;
    const double transfer_seconds = transfer.Seconds();
    if (absl::Status s = internal::CheckMatches(*set, dst); !s.ok()) return s;
    Stopwatch load;
    if (absl::Status s = internal::LoadInto(*set, dst); !s.ok()) return s;
    v1::WeightSyncStats stats = internal::BaseStats(*set);
    stats.set_transfer_seconds(transfer_seconds);
    stats.set_load_seconds(load.Seconds());
    return stats;
  }

 private:
  absl::Status Connect(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (absl::Status s = internal::WaitForListener(ep_.host, ep_.port, deadline);
        !s.ok()) {
      return s;
    }
    absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>> store =
        internal::ConnectStore(ep_.host, ep_.port, /*server=*/false,
                               std::min(deadline - absl::Now(),
                                        ep_.connect_timeout));
    if (!store.ok()) return store.status();
    store_ = *std::move(store);
    gen_ = store_->add(Key(ep_.receiver_index, "generation"), 1);
    const std::string id_key = Key(ep_.receiver_index, gen_, "id");
    store_->wait({id_key}, ToMs(deadline - absl::Now()));
    const std::vector<uint8_t> bytes = store_->get(id_key);
    ncclUniqueId id;
    if (bytes.size() != sizeof(id.internal)) {
      return absl::DataLossError("the sender's ncclUniqueId has a bad size");
    }
    std::memcpy(id.internal, bytes.data(), bytes.size());
    absl::StatusOr<std::unique_ptr<Comm>> comm =
        Comm::Init(id, 1, ep_.cuda_device, deadline);
    if (!comm.ok()) return comm.status();
    comm_ = *std::move(comm);
    seq_ = 0;
    return absl::OkStatus();
  }

  absl::Status ReceiveBuckets(BucketSet& set, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (device_.size() < set.buckets.size()) {
      device_ = std::vector<DeviceBytes>(set.buckets.size());
    }
    std::vector<void*> ptr;
    std::vector<size_t> n;
    for (size_t i = 0; i < set.buckets.size(); ++i) {
      const size_t bytes = static_cast<size_t>(set.buckets[i].numel());
      if (absl::Status s = device_[i].Reserve(std::max<size_t>(bytes, 1));
          !s.ok()) {
        return s;
      }
      ptr.push_back(device_[i].data());
      n.push_back(bytes);
    }
    // The sender is committed once it answered; give it a fair bound.
    const absl::Time io_deadline =
        std::max(deadline, absl::Now() + ep_.connect_timeout);
    if (absl::Status s = comm_->Transfer(/*send=*/false, ptr, n, io_deadline);
        !s.ok()) {
      return s;
    }
    for (size_t i = 0; i < set.buckets.size(); ++i) {
      if (n[i] == 0) continue;
      if (absl::Status s = CudaStatus(
              cudaMemcpyAsync(set.buckets[i].data_ptr(), ptr[i], n[i],
                              cudaMemcpyDeviceToHost, comm_->stream()),
              "copying a bucket to the host");
          !s.ok()) {
        return s;
      }
    }
    return CudaStatus(cudaStreamSynchronize(comm_->stream()),
                      "cudaStreamSynchronize");
  }

  const NcclEndpoint ep_;
  absl::Mutex mu_;
  c10::intrusive_ptr<c10d::TCPStore> store_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Comm> comm_ ABSL_GUARDED_BY(mu_);
  std::vector<DeviceBytes> device_ ABSL_GUARDED_BY(mu_);
  std::vector<at::Tensor> spare_ ABSL_GUARDED_BY(mu_);
  int64_t gen_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t seq_ ABSL_GUARDED_BY(mu_) = 0;
};

absl::Status CheckEndpoint(const NcclEndpoint& ep) {
  if (ep.port <= 0 || ep.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weightsync nccl: port must be in 1..65535, got ", ep.port));
  }
  if (ep.num_receivers < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weightsync nccl: num_receivers must be >= 1, got ", ep.num_receivers));
  }
  if (ep.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "weightsync nccl: connect_timeout must be positive");
  }
  return absl::OkStatus();
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
  if (endpoint.receiver_index != -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weightsync nccl: a sender has receiver_index -1, got ",
        endpoint.receiver_index));
  }
  auto st = std::make_shared<SenderState>(endpoint, options);
  absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>> server =
      internal::ConnectStore(endpoint.host, endpoint.port, /*server=*/true,
                             endpoint.connect_timeout);
  if (!server.ok()) return server.status();
  st->server = *std::move(server);
  return std::make_unique<NcclSender>(std::move(st));
}

absl::StatusOr<std::unique_ptr<Transport>> NewNcclReceiver(
    const NcclEndpoint& endpoint, TransportOptions options) {
  if (absl::Status s = CheckEndpoint(endpoint); !s.ok()) return s;
  if (endpoint.receiver_index < 0 ||
      endpoint.receiver_index >= endpoint.num_receivers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weightsync nccl: receiver_index must be in 0..",
        endpoint.num_receivers - 1, ", got ", endpoint.receiver_index));
  }
  return std::make_unique<NcclReceiver>(endpoint);
}

}  // namespace trellis::weightsync
