// The receiving end of the gRPC stream transport (weightsync/grpc_transport.h).

#include <ATen/ATen.h>
#include <grpcpp/grpcpp.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "rpc/channel.h"
#include "rpc/status.h"
#include "trellis/v1/weights.grpc.pb.h"
#include "weightsync/grpc_transport.h"
#include "weightsync/internal/bucket_set.h"
#include "weightsync/internal/pull_receiver.h"
#include "weightsync/internal/staging.h"
#include "weightsync/internal/wire.h"

namespace trellis::weightsync {
namespace {

using internal::BucketSet;

// How long past its timeout a receiver waits for the header.
constexpr absl::Duration kAnswerGrace = absl::Milliseconds(300);
// Once the header is in, how long the rest may take at the least.
constexpr absl::Duration kMinStreamTime = absl::Seconds(30);

class GrpcReceiver final : public internal::PullReceiver {
 public:
  explicit GrpcReceiver(std::string address)
      : PullReceiver("weightsync grpc receiver", address),
        stub_(v1::WeightStream::NewStub(rpc::NewChannel(address))) {}

 private:
  absl::StatusOr<Fetched> Fetch(int64_t min_version, absl::Time deadline, bool* in_step) override {
    v1::FetchWeightsRequest request;
    request.set_min_version(min_version);
    request.set_wait_ms(
        absl::ToInt64Milliseconds(std::max(deadline - absl::Now(), absl::ZeroDuration())));
    grpc::ClientContext context;
    context.set_wait_for_ready(true);  // Wait for a publisher still starting.
    context.set_deadline(absl::ToChronoTime(deadline + kAnswerGrace + kMinStreamTime));
    // Cancels the call if no header came by the deadline (a publisher that
    // never started or hangs).
    absl::Notification header_arrived;
    std::thread watchdog([&] {
      if (!header_arrived.WaitForNotificationWithDeadline(deadline + kAnswerGrace)) {
        context.TryCancel();
      }
    });
    absl::StatusOr<Fetched> fetched = Stream(context, request, header_arrived, in_step);
    if (!header_arrived.HasBeenNotified()) header_arrived.Notify();
    watchdog.join();
    return fetched;
  }

  // Reads the stream: the header, then every bucket.
  absl::StatusOr<Fetched> Stream(grpc::ClientContext& context,
                                 const v1::FetchWeightsRequest& request,
                                 absl::Notification& header_arrived, bool* in_step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::unique_ptr<grpc::ClientReader<v1::WeightChunk>> reader = stub_->Fetch(&context, request);
    v1::WeightChunk chunk;
    if (!reader->Read(&chunk)) return rpc::FromGrpc(reader->Finish());
    header_arrived.Notify();
    internal::Stopwatch transfer;
    // Ends the call early, keeping `error`.
    auto abandon = [&](absl::Status error) {
      context.TryCancel();
      reader->Finish().ok();
      return error;
    };
    if (!chunk.has_header()) {
      return abandon(
          absl::DataLossError("weightsync grpc: the stream did not start with a header"));
    }
    absl::StatusOr<BucketSet> set = internal::DecodeHeader(chunk.header(), spare());
    if (!set.ok()) return abandon(set.status());
    size_t bucket = 0;
    int64_t filled = 0;
    absl::Status corrupt;
    auto settle = [&] {  // Verifies every bucket that is complete.
      while (bucket < set->buckets.size() && filled == set->buckets[bucket].numel()) {
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
        return abandon(absl::DataLossError(absl::StrCat("weightsync grpc: a ", data.size(),
                                                        "-byte chunk for bucket ", bucket,
                                                        " which has ", room, " bytes left")));
      }
      std::memcpy(static_cast<char*>(set->buckets[bucket].data_ptr()) + filled, data.data(),
                  data.size());
      filled += static_cast<int64_t>(data.size());
      settle();
    }
    absl::Status finished = rpc::FromGrpc(reader->Finish());
    if (bucket < set->buckets.size()) {
      return finished.ok()
                 ? absl::DataLossError(absl::StrCat("weightsync grpc: the stream ended in bucket ",
                                                    bucket, " of ", set->buckets.size()))
                 : finished;
    }
    if (!finished.ok()) return finished;
    *in_step = true;
    return Fetched{*std::move(set), transfer.Seconds(), corrupt};
  }

  std::unique_ptr<v1::WeightStream::Stub> stub_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Receiver>> NewGrpcReceiver(const TransportOptions& options) {
  if (options.host.empty() || options.port <= 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("weightsync grpc: the publisher's address \"",
                                                   options.host, ":", options.port,
                                                   "\" needs a host and a port in 1..65535"));
  }
  return std::make_unique<GrpcReceiver>(absl::StrCat(options.host, ":", options.port));
}

}  // namespace trellis::weightsync
