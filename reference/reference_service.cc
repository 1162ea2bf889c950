#include "reference/reference_service.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "env/confined_path.h"
#include "model/token_ids.h"
#include "rpc/channel.h"

namespace trellis::reference {

ReferenceService::ReferenceService(std::string worker_id)
    : worker_(std::move(worker_id), model::StatusFromException) {
  const rpc::CountCheck samples = [this](int64_t n) {
    return config::CheckBatchSize("samples", n, limits_.Get());
  };
  constexpr int kSamples = v1::LogProbRequest::kSamplesFieldNumber;
  CountUnary("trellis.v1.Reference", "LogProbs", kSamples, samples, &ReferenceService::LogProbs);
  CountUnary("trellis.v1.Reference", "Scores", kSamples, samples, &ReferenceService::Scores);
}

void ReferenceService::Bind(ReferenceWorker* worker, const config::RequestLimits& limits,
                    std::string run_dir) {
  limits_.Set(limits);
  {
    absl::MutexLock lock(&mu_);
    run_dir_ = std::move(run_dir);
  }
  worker_.Bind(worker);
}

absl::Status ReferenceService::CheckRequest(const v1::LogProbRequest& request) const {
  const config::RequestLimits limits = limits_.Get();
  if (absl::Status s = config::CheckLogProbRequest(request, limits); !s.ok()) return s;
  for (int i = 0; i < request.samples_size(); ++i) {
    absl::Status s = model::CheckSampleTokenIds(request.samples(i), limits.vocab_size, i);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

grpc::Status ReferenceService::LogProbs(grpc::ServerContext*, const v1::LogProbRequest* request,
                                        v1::LogProbResponse* response) {
  if (absl::Status s = CheckRequest(*request); !s.ok()) return rpc::ToGrpc(s);
  return worker_.Unary(response, [&](ReferenceWorker& w) { return w.LogProbs(*request); });
}

grpc::Status ReferenceService::Scores(grpc::ServerContext*, const v1::LogProbRequest* request,
                                      v1::ScoreResponse* response) {
  if (absl::Status s = CheckRequest(*request); !s.ok()) return rpc::ToGrpc(s);
  return worker_.Unary(response, [&](ReferenceWorker& w) { return w.Scores(*request); });
}

grpc::Status ReferenceService::Load(grpc::ServerContext*, const v1::PathRequest* request,
                                    v1::Empty*) {
  absl::StatusOr<std::string> path;
  {
    absl::MutexLock lock(&mu_);
    path = env::ConfinedPath(run_dir_, request->path());
  }
  if (!path.ok()) return rpc::ToGrpc(path.status());
  return rpc::ToGrpc(worker_.Run([&](ReferenceWorker& w) { return w.Load(*path); }));
}

namespace {

class GrpcReferenceClient final : public ReferenceWorker {
 public:
  GrpcReferenceClient(std::shared_ptr<grpc::Channel> channel, std::string worker_id,
                      absl::Duration timeout, std::string run_dir)
      : stub_(v1::Reference::NewStub(channel)),
        id_(std::move(worker_id)),
        timeout_(timeout),
        run_dir_(std::move(run_dir)) {}

  absl::StatusOr<v1::LogProbResponse> LogProbs(const v1::LogProbRequest& request) override {
    return rpc::Call(*stub_, &v1::Reference::Stub::LogProbs, request, timeout_,
                     absl::StrCat(id_, " LogProbs"));
  }
  absl::StatusOr<v1::ScoreResponse> Scores(const v1::LogProbRequest& request) override {
    return rpc::Call(*stub_, &v1::Reference::Stub::Scores, request, timeout_,
                     absl::StrCat(id_, " Scores"));
  }
  absl::Status Load(const std::string& weights_path) override {
    absl::StatusOr<std::string> relative = env::PathInside(run_dir_, weights_path);
    if (!relative.ok()) return relative.status();
    v1::PathRequest request;
    request.set_path(*relative);
    return rpc::Call(*stub_, &v1::Reference::Stub::Load, request, timeout_,
                     absl::StrCat(id_, " Load"))
        .status();
  }

 private:
  std::unique_ptr<v1::Reference::Stub> stub_;
  const std::string id_;
  const absl::Duration timeout_;
  const std::string run_dir_;
};

}  // namespace

std::unique_ptr<ReferenceWorker> NewGrpcReferenceClient(std::shared_ptr<grpc::Channel> channel,
                                                        std::string worker_id,
                                                        absl::Duration timeout,
                                                        std::string run_dir) {
  return std::make_unique<GrpcReferenceClient>(std::move(channel), std::move(worker_id), timeout,
                                               std::move(run_dir));
}

}  // namespace trellis::reference
