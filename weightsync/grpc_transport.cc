// The publishing end of the gRPC stream transport: see grpc_transport.h.

#include "weightsync/grpc_transport.h"

#include <ATen/ATen.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "config/request_limits.h"
#include "rpc/status.h"
#include "trellis/v1/weights.grpc.pb.h"
#include "weightsync/internal/bucket_set.h"
#include "weightsync/internal/staging.h"
#include "weightsync/internal/wire.h"
#include "weightsync/registry.h"
#ifdef TRELLIS_WEIGHTSYNC_NCCL
#include "weightsync/nccl_transport.h"
#endif
#ifdef TRELLIS_WEIGHTSYNC_CUDA_IPC
#include "weightsync/cuda_ipc_transport.h"
#endif

namespace trellis::weightsync {
namespace {

using internal::BucketSet;
using internal::VersionStage;

constexpr char kName[] = "weightsync grpc";
// Every message stays within 4 MiB, bytes field and framing included.
constexpr int64_t kChunkBytes = (int64_t{4} << 20) - 1024;
// A waiting call re-checks for cancellation (and a publisher) this often.
constexpr absl::Duration kPollCancel = absl::Milliseconds(100);

class WeightStreamService final : public v1::WeightStream::Service, public WeightStreamHost {
 public:
  grpc::Service* service() override { return this; }

  absl::StatusOr<std::unique_ptr<Publisher>> NewPublisher(const TransportOptions& options) override;

  // Called by the publisher as it goes.
  void Unbind(const VersionStage* stage) {
    absl::MutexLock lock(&mu_);
    if (stage_.get() == stage) stage_.reset();
  }

  grpc::Status Fetch(grpc::ServerContext* context, const v1::FetchWeightsRequest* request,
                     grpc::ServerWriter<v1::WeightChunk>* writer) override {
    if (absl::Status s = config::CheckFetchRequest(*request, config::RequestLimits()); !s.ok()) {
      return rpc::ToGrpc(s);
    }
    absl::Time deadline =
        absl::Now() + absl::Milliseconds(std::max<int64_t>(0, request->wait_ms()));
    deadline = std::min(deadline, absl::FromChrono(context->deadline()));
    absl::StatusOr<std::shared_ptr<const BucketSet>> set;
    while (true) {
      const absl::Time until = std::min(deadline, absl::Now() + kPollCancel);
      std::shared_ptr<VersionStage> stage = StageBy(until);
      if (stage != nullptr) {
        set = stage->WaitFor(request->min_version(), until);
      } else {
        set = absl::DeadlineExceededError(absl::StrCat(
            kName,
            ": no publisher on this server for weights version >= ", request->min_version()));
      }
      if (set.ok() || !absl::IsDeadlineExceeded(set.status()) || absl::Now() >= deadline) {
        break;
      }
      if (context->IsCancelled()) {
        return grpc::Status(grpc::StatusCode::CANCELLED, "receiver left");
      }
    }
    if (!set.ok()) {
      if (absl::IsCancelled(set.status())) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, std::string(set.status().message()));
      }
      return rpc::ToGrpc(set.status());
    }
    return Stream(**set, writer);
  }

 private:
  bool BoundLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stage_ != nullptr; }

  // The bound publisher's stage, waiting until `until` for one; null if
  // there is none by then.
  std::shared_ptr<VersionStage> StageBy(absl::Time until) {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithDeadline(absl::Condition(this, &WeightStreamService::BoundLocked), until);
    return stage_;
  }

  static grpc::Status Stream(const BucketSet& set, grpc::ServerWriter<v1::WeightChunk>* writer) {
    v1::WeightChunk chunk;
    *chunk.mutable_header() = internal::EncodeHeader(set);
    if (!writer->Write(chunk)) return grpc::Status(grpc::StatusCode::CANCELLED, "receiver left");
    for (const at::Tensor& bucket : set.buckets) {
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

  absl::Mutex mu_;
  std::shared_ptr<VersionStage> stage_ ABSL_GUARDED_BY(mu_);
};

class GrpcPublisher final : public Publisher, public internal::StagedSender {
 public:
  GrpcPublisher(WeightStreamService* host, std::shared_ptr<VersionStage> stage)
      : host_(host), stage_(std::move(stage)) {}
  ~GrpcPublisher() override {
    stage_->Close();
    host_->Unbind(stage_.get());
  }

  absl::StatusOr<v1::WeightSyncStats> Publish(int64_t version,
                                              const NamedTensors& tensors) override {
    return stage_->Stage(version, tensors);
  }

  VersionStage* stage() override { return stage_.get(); }

 private:
  WeightStreamService* const host_;
  const std::shared_ptr<VersionStage> stage_;
};

absl::StatusOr<std::unique_ptr<Publisher>> WeightStreamService::NewPublisher(
    const TransportOptions& options) {
  absl::MutexLock lock(&mu_);
  if (stage_ != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(kName, ": this server's WeightStream service has a live publisher already"));
  }
  stage_ = std::make_shared<VersionStage>(kName, options.bucket_bytes);
  return std::unique_ptr<Publisher>(std::make_unique<GrpcPublisher>(this, stage_));
}

}  // namespace

std::unique_ptr<WeightStreamHost> NewWeightStreamHost() {
  return std::make_unique<WeightStreamService>();
}

absl::Status RegisterGrpcTransport(TransportRegistry& registry, WeightStreamHost* host) {
  return registry.Register(
      "grpc",
      [host](const TransportOptions& options) -> absl::StatusOr<std::unique_ptr<Publisher>> {
        if (host == nullptr) {
          return absl::FailedPreconditionError(
              absl::StrCat(kName, ": this process's server carries no WeightStream service"));
        }
        return host->NewPublisher(options);
      },
      NewGrpcReceiver, Endpoint::kLearnerServer);
}

absl::StatusOr<TransportRegistry> LaunchedTransports(WeightStreamHost* host) {
  TransportRegistry registry;
  if (absl::Status s = RegisterBuiltinTransports(registry); !s.ok()) return s;
  if (absl::Status s = RegisterGrpcTransport(registry, host); !s.ok()) return s;
#ifdef TRELLIS_WEIGHTSYNC_NCCL
  if (absl::Status s = RegisterNcclTransport(registry); !s.ok()) return s;
#endif
#ifdef TRELLIS_WEIGHTSYNC_CUDA_IPC
  if (absl::Status s = RegisterCudaIpcTransport(registry); !s.ok()) return s;
#endif
  return registry;
}

}  // namespace trellis::weightsync
