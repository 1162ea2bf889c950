#include "reference/reference_service.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "model/token_ids.h"
#include "rpc/channel.h"

namespace trellis::reference {

void ReferenceService::Bind(ReferenceWorker* worker, const config::RequestLimits& limits) {
  limits_.Set(limits);
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
  if (request->path().empty()) {
    return rpc::ToGrpc(absl::InvalidArgumentError("path: required"));
  }
  return rpc::ToGrpc(worker_.Run([&](ReferenceWorker& w) { return w.Load(request->path()); }));
}

namespace {

class GrpcReferenceClient final : public ReferenceWorker {
 public:
  GrpcReferenceClient(std::shared_ptr<grpc::Channel> channel, std::string worker_id,
                      absl::Duration timeout)
      : stub_(v1::Reference::NewStub(channel)), id_(std::move(worker_id)), timeout_(timeout) {}

  absl::StatusOr<v1::LogProbResponse> LogProbs(const v1::LogProbRequest& request) override {
    return rpc::Call(*stub_, &v1::Reference::Stub::LogProbs, request, timeout_,
                     absl::StrCat(id_, " LogProbs"));
  }
  absl::StatusOr<v1::ScoreResponse> Scores(const v1::LogProbRequest& request) override {
    return rpc::Call(*stub_, &v1::Reference::Stub::Scores, request, timeout_,
                     absl::StrCat(id_, " Scores"));
  }
  absl::Status Load(const std::string& weights_path) override {
    v1::PathRequest request;
    request.set_path(weights_path);
    return rpc::Call(*stub_, &v1::Reference::Stub::Load, request, timeout_,
                     absl::StrCat(id_, " Load"))
        .status();
  }

 private:
  std::unique_ptr<v1::Reference::Stub> stub_;
  const std::string id_;
  const absl::Duration timeout_;
};

}  // namespace

std::unique_ptr<ReferenceWorker> NewGrpcReferenceClient(std::shared_ptr<grpc::Channel> channel,
                                                        std::string worker_id,
                                                        absl::Duration timeout) {
  return std::make_unique<GrpcReferenceClient>(std::move(channel), std::move(worker_id),
                                               timeout);
}

}  // namespace trellis::reference
