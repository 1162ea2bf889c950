// The gRPC stream transport: see grpc_transport.h.

#include "weightsync/grpc_transport.h"

#include <ATen/ATen.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "rpc/channel.h"
#include "rpc/status.h"
#include "trellis/v1/weights.grpc.pb.h"
#include "weightsync/internal/bucket_set.h"
#include "weightsync/internal/staging.h"
#include "weightsync/internal/wire.h"

namespace trellis::weightsync {
namespace {

using internal::BucketSet;
using internal::Stopwatch;

// Every message stays within 4 MiB, bytes field and framing included.
constexpr int64_t kChunkBytes = (int64_t{4} << 20) - 1024;
// How long past its timeout a receiver waits for the header.
constexpr absl::Duration kAnswerGrace = absl::Milliseconds(300);
// Once the header is in, how long the rest may take at the least.
constexpr absl::Duration kMinStreamTime = absl::Seconds(30);
// The sender re-checks a waiting call for cancellation this often.
constexpr absl::Duration kPollCancel = absl::Milliseconds(100);

class WeightStreamService final : public v1::WeightStream::Service {
 public:
  explicit WeightStreamService(internal::VersionStage* stage) : stage_(stage) {}

  grpc::Status Fetch(grpc::ServerContext* context,
                     const v1::FetchWeightsRequest* request,
                     grpc::ServerWriter<v1::WeightChunk>* writer) override {
    absl::Time deadline =
        absl::Now() + absl::Milliseconds(std::max<int64_t>(0, request->wait_ms()));
    deadline = std::min(deadline, absl::FromChrono(context->deadline()));
    absl::StatusOr<std::shared_ptr<const BucketSet>> set;
    while (true) {
      set = stage_->WaitFor(request->min_version(),
                            std::min(deadline, absl::Now() + kPollCancel));
      if (set.ok() || !absl::IsDeadlineExceeded(set.status()) ||
          absl::Now() >= deadline) {
        break;
      }
      if (context->IsCancelled()) {
        return grpc::Status(grpc::StatusCode::CANCELLED, "receiver left");
      }
    }
    if (!set.ok()) {
      if (absl::IsCancelled(set.status())) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            std::string(set.status().message()));
      }
      return rpc::ToGrpc(set.status());
    }
    const BucketSet& s = **set;
    v1::WeightChunk chunk;
    *chunk.mutable_header() = internal::EncodeHeader(s);
    if (!writer->Write(chunk)) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "receiver left");
    }
    for (const at::Tensor& bucket : s.buckets) {
      const char* data = static_cast<const char*>(bucket.data_ptr());
      for (int64_t off = 0; off < bucket.numel(); off += kChunkBytes) {
        const int64_t n = std::min(kChunkBytes, bucket.numel() - off);
        chunk.set_data(data + off, static_cast<size_t>(n));
        if (!writer->Write(chunk)) {
          return grpc::Status(grpc::StatusCode::CANCELLED, "receiver left");
        }
      }
    }
    return grpc::Status::OK;
  }

 private:
  internal::VersionStage* const stage_;
};

class GrpcSenderImpl final : public GrpcSender, public internal::StagedSender {
 public:
  explicit GrpcSenderImpl(TransportOptions options)
      : stage_("weightsync grpc", options.bucket_bytes), service_(&stage_) {}
  ~GrpcSenderImpl() override { stage_.Close(); }

  absl::StatusOr<v1::WeightSyncStats> Publish(
      int64_t version, const NamedTensors& tensors) override {
    return stage_.Stage(version, tensors);
  }

  absl::StatusOr<v1::WeightSyncStats> Receive(int64_t, const NamedTensors&,
                                              absl::Duration) override {
    return absl::UnimplementedError(
        "weightsync grpc: Receive on the sending end");
  }

  grpc::Service* service() override { return &service_; }
  internal::VersionStage* stage() override { return &stage_; }

 private:
  internal::VersionStage stage_;
  WeightStreamService service_;
};

class GrpcReceiver final : public Transport {
 public:
  explicit GrpcReceiver(std::string address)
      : address_(std::move(address)),
        channel_(rpc::NewChannel(address_)),
        stub_(v1::WeightStream::NewStub(channel_)) {}

  absl::StatusOr<v1::WeightSyncStats> Publish(int64_t,
                                              const NamedTensors&) override {
    return absl::UnimplementedError(
        "weightsync grpc: Publish on a receiving end");
  }

  absl::StatusOr<v1::WeightSyncStats> Receive(int64_t min_version,
                                              const NamedTensors& dst,
                                              absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    const absl::Time start = absl::Now();
    const absl::Time deadline = start + timeout;
    auto where = [&] {
      return absl::StrCat("weightsync grpc: waited ",
                          absl::FormatDuration(absl::Now() - start),
                          " for weights version >= ", min_version, " from ",
                          address_);
    };
    v1::FetchWeightsRequest request;
    request.set_min_version(min_version);
    request.set_wait_ms(absl::ToInt64Milliseconds(timeout));
    grpc::ClientContext context;
    context.set_wait_for_ready(true);  // Wait for a sender still starting.
    context.set_deadline(
        absl::ToChronoTime(deadline + kAnswerGrace + kMinStreamTime));
    // Cancels the call if no header came by the deadline (a sender that
    // never started or hangs).
    absl::Notification header_arrived;
    std::thread watchdog([&] {
      if (!header_arrived.WaitForNotificationWithDeadline(deadline +
                                                          kAnswerGrace)) {
        context.TryCancel();
      }
    });
    absl::StatusOr<BucketSet> set = Stream(context, request, header_arrived);
    if (!header_arrived.HasBeenNotified()) header_arrived.Notify();
    watchdog.join();
    if (!set.ok()) {
      if (absl::IsDeadlineExceeded(set.status()) ||
          absl::IsCancelled(set.status())) {
        return absl::DeadlineExceededError(
            absl::StrCat(where(), ": ", set.status().message()));
      }
      if (absl::IsUnavailable(set.status())) {
        return absl::UnavailableError(
            absl::StrCat(where(), ": ", set.status().message()));
      }
      return set.status();
    }
    // The buckets are this receiver's own (spare_ reuses only free ones).
    return internal::FinishReceive(*set, dst, transfer_seconds_, spare_.buckets());
  }

 private:
  absl::StatusOr<BucketSet> Stream(grpc::ClientContext& context,
                                   const v1::FetchWeightsRequest& request,
                                   absl::Notification& header_arrived)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::unique_ptr<grpc::ClientReader<v1::WeightChunk>> reader =
        stub_->Fetch(&context, request);
    v1::WeightChunk chunk;
    if (!reader->Read(&chunk)) {
      return rpc::FromGrpc(reader->Finish());
    }
    header_arrived.Notify();
    Stopwatch transfer;
    if (!chunk.has_header()) {
      context.TryCancel();
      reader->Finish().ok();
      return absl::DataLossError(
          "weightsync grpc: the stream did not start with a header");
    }
    absl::StatusOr<BucketSet> set =
        internal::DecodeHeader(chunk.header(), spare_.buckets());
    if (!set.ok()) {
      context.TryCancel();
      reader->Finish().ok();
      return set.status();
    }
    size_t bucket = 0;
    int64_t filled = 0;
    absl::Status corrupt;
    auto settle = [&] {  // Verifies every bucket that is complete.
      while (bucket < set->buckets.size() &&
             filled == set->buckets[bucket].numel()) {
        if (corrupt.ok()) corrupt = internal::VerifyBucket(*set, bucket);
        ++bucket;
        filled = 0;
      }
    };
    settle();
    while (bucket < set->buckets.size() && reader->Read(&chunk)) {
      const std::string& data = chunk.data();
      const int64_t room = set->buckets[bucket].numel() - filled;
      if (static_cast<int64_t>(data.size()) > room || data.empty()) {
        context.TryCancel();
        reader->Finish().ok();
        return absl::DataLossError(absl::StrCat(
            "weightsync grpc: a ", data.size(), "-byte chunk for bucket ",
            bucket, " which has ", room, " bytes left"));
      }
      std::memcpy(
          static_cast<char*>(set->buckets[bucket].data_ptr()) + filled,
          data.data(), data.size());
      filled += static_cast<int64_t>(data.size());
      settle();
    }
    if (bucket < set->buckets.size()) {
      absl::Status s = rpc::FromGrpc(reader->Finish());
      if (s.ok()) {
        s = absl::DataLossError(absl::StrCat(
            "weightsync grpc: the stream ended in bucket ", bucket, " of ",
            set->buckets.size()));
      }
      return s;
    }
    if (absl::Status s = rpc::FromGrpc(reader->Finish()); !s.ok()) return s;
    spare_.Remember(set->buckets);
    transfer_seconds_ = transfer.Seconds();
    if (!corrupt.ok()) return corrupt;
    return set;
  }

  const std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::WeightStream::Stub> stub_;
  absl::Mutex mu_;
  internal::SparePool spare_ ABSL_GUARDED_BY(mu_);
  double transfer_seconds_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

std::unique_ptr<GrpcSender> NewGrpcSender(TransportOptions options) {
  return std::make_unique<GrpcSenderImpl>(options);
}

absl::StatusOr<std::unique_ptr<Transport>> NewGrpcReceiver(
    const std::string& address, TransportOptions options) {
  if (address.empty()) {
    return absl::InvalidArgumentError(
        "weightsync grpc: the sender's address is empty");
  }
  return std::make_unique<GrpcReceiver>(address);
}

}  // namespace trellis::weightsync
