// The receiving end of the NCCL transport (weightsync/nccl_transport.h).

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "cuda/nccl_pair.h"
#include "comm/tcp_store.h"
#include "trellis/v1/weights.pb.h"
#include "weightsync/internal/bucket_set.h"
#include "weightsync/internal/nccl_protocol.h"
#include "weightsync/internal/staging.h"
#include "weightsync/internal/store_receiver.h"
#include "weightsync/internal/threaded_sender.h"
#include "weightsync/internal/wire.h"
#include "weightsync/nccl_transport.h"

// In the protocol's namespace (internal/nccl_protocol.h), for its names.
namespace trellis::weightsync::internal::nccl {
namespace {

using cuda::CudaStatus;
using cuda::DeviceBytes;
using cuda::NcclComm;
using comm::ToMs;

class NcclReceiver final : public StoreReceiver {
 public:
  explicit NcclReceiver(const TransportOptions& options)
      : StoreReceiver(kName, {Key, Key}, kAnswerGrace, options) {}

 private:
  void Disconnect() override {
    comm_.reset();
    store_.reset();
  }

  absl::StatusOr<Fetched> Fetch(int64_t min_version, absl::Time deadline, bool* in_step) override {
    absl::StatusOr<std::string> body = Ask(min_version, deadline, in_step);
    if (!body.ok()) return body.status();
    *in_step = false;  // Until the buckets are in.
    v1::WeightsHeader header;
    if (!header.ParseFromString(*body)) {
      return absl::DataLossError("the publisher's header does not parse");
    }
    Stopwatch transfer;
    absl::StatusOr<BucketSet> set = DecodeHeader(header, spare());
    if (!set.ok()) return set.status();
    if (absl::Status s = ReceiveBuckets(*set, deadline); !s.ok()) return s;
    *in_step = true;
    absl::Status verified = VerifyChecksums(*set);
    return Fetched{*std::move(set), transfer.Seconds(), std::move(verified)};
  }

  bool Linked() const override { return comm_ != nullptr; }

  absl::Status Link(absl::Time deadline) override {
    if (absl::Status s = ConnectStore(deadline); !s.ok()) return s;
    const std::string id_key = Key(options_.receiver_index, gen_, "id");
    store_->wait({id_key}, ToMs(deadline - absl::Now()));
    const std::vector<uint8_t> bytes = store_->get(id_key);
    ncclUniqueId id;
    if (bytes.size() != sizeof(id.internal)) {
      return absl::DataLossError("the publisher's ncclUniqueId has a bad size");
    }
    std::memcpy(id.internal, bytes.data(), bytes.size());
    absl::StatusOr<std::unique_ptr<NcclComm>> comm =
        NcclComm::Init(id, 1, options_.cuda_device, deadline);
    if (!comm.ok()) return comm.status();
    comm_ = *std::move(comm);
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
      if (absl::Status s = device_[i].Reserve(std::max<size_t>(bytes, 1)); !s.ok()) return s;
      ptr.push_back(device_[i].data());
      n.push_back(bytes);
    }
    // The publisher is committed once it answered; give it a fair bound.
    const absl::Time io_deadline = std::max(deadline, absl::Now() + options_.connect_timeout);
    if (absl::Status s = comm_->Transfer(/*send=*/false, ptr, n, io_deadline); !s.ok()) {
      return s;
    }
    for (size_t i = 0; i < set.buckets.size(); ++i) {
      if (n[i] == 0) continue;
      if (absl::Status s = CudaStatus(cudaMemcpyAsync(set.buckets[i].data_ptr(), ptr[i], n[i],
                                                      cudaMemcpyDeviceToHost, comm_->stream()),
                                      "copying a bucket to the host");
          !s.ok()) {
        return s;
      }
    }
    return CudaStatus(cudaStreamSynchronize(comm_->stream()), "cudaStreamSynchronize");
  }

  std::unique_ptr<NcclComm> comm_ ABSL_GUARDED_BY(mu_);
  std::vector<DeviceBytes> device_ ABSL_GUARDED_BY(mu_);
};

}  // namespace
}  // namespace trellis::weightsync::internal::nccl

namespace trellis::weightsync {

absl::StatusOr<std::unique_ptr<Receiver>> NewNcclReceiver(const TransportOptions& options) {
  return internal::NewSlotReceiver<internal::nccl::NcclReceiver>(internal::nccl::kName, options);
}

}  // namespace trellis::weightsync
