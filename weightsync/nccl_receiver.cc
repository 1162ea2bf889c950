// The receiving end of the NCCL transport (weightsync/nccl_transport.h).

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
using internal::nccl::kAnswerGrace;
using internal::nccl::CudaStatus;
using internal::nccl::Key;
using internal::nccl::Int64s;
using internal::nccl::Int64At;
using internal::nccl::DeviceBytes;
using internal::nccl::Comm;
using internal::nccl::CheckEndpoint;

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
    return internal::FinishReceive(*set, dst, transfer_seconds);
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

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> NewNcclReceiver(
    const NcclEndpoint& endpoint, TransportOptions options) {
  if (absl::Status s = CheckEndpoint(endpoint); !s.ok()) return s;
  if (absl::Status s = internal::CheckReceiverIndex("weightsync nccl", /*sender=*/false,
                                                 endpoint.receiver_index,
                                                 endpoint.num_receivers);
      !s.ok()) {
    return s;
  }
  return std::make_unique<NcclReceiver>(endpoint);
}

}  // namespace trellis::weightsync
