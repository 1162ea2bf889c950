#include "learner/learner_service.h"

#include <grpcpp/grpcpp.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/token_ids.h"
#include "rpc/channel.h"

namespace trellis::learner {
namespace {

absl::Status CheckPath(const v1::PathRequest& request) {
  if (request.path().empty()) return absl::InvalidArgumentError("path: required");
  return absl::OkStatus();
}

// Runs a Status-returning call into an Empty reply.
template <typename Fn>
grpc::Status EmptyReply(rpc::BoundWorker<LearnerWorker>& worker, const v1::PathRequest& request,
                        Fn fn) {
  if (absl::Status s = CheckPath(request); !s.ok()) return rpc::ToGrpc(s);
  return rpc::ToGrpc(worker.Run([&](LearnerWorker& w) { return fn(w, request.path()); }));
}

using IdList = std::pair<const char*, const google::protobuf::RepeatedField<int32_t>*>;

// Every id list fields(pair) names, of every pair of `batch`, is in the
// vocabulary; an error names "pairs[i].<field>".
template <typename Batch, typename Fields>
absl::Status CheckPairIds(const Batch& batch, int64_t vocab_size, Fields fields) {
  for (int i = 0; i < batch.pairs_size(); ++i) {
    for (const IdList& list : fields(batch.pairs(i))) {
      absl::Status s = model::CheckTokenIds(*list.second, vocab_size,
                                            absl::StrCat("pairs[", i, "].", list.first));
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

// The request's sizes, then its token ids.
absl::Status CheckSft(const v1::SftBatch& batch, const config::RequestLimits& limits) {
  if (absl::Status s = config::CheckSftBatch(batch, limits); !s.ok()) return s;
  return CheckPairIds(batch, limits.vocab_size, [](const v1::SftBatch::Pair& p) {
    return std::vector<IdList>{{"prompt_tokens", &p.prompt_tokens()},
                               {"target_tokens", &p.target_tokens()}};
  });
}

absl::Status CheckPreference(const v1::PreferenceBatch& batch,
                             const config::RequestLimits& limits) {
  if (absl::Status s = config::CheckPreferenceBatch(batch, limits); !s.ok()) return s;
  return CheckPairIds(batch, limits.vocab_size, [](const v1::PreferencePair& p) {
    return std::vector<IdList>{{"prompt_tokens", &p.prompt_tokens()},
                               {"chosen_tokens", &p.chosen_tokens()},
                               {"rejected_tokens", &p.rejected_tokens()}};
  });
}

absl::Status CheckTrain(const v1::TrainBatch& batch, const config::RequestLimits& limits) {
  if (absl::Status s = config::CheckTrainBatch(batch, limits); !s.ok()) return s;
  for (int i = 0; i < batch.samples_size(); ++i) {
    absl::Status s = model::CheckSampleTokenIds(batch.samples(i), limits.vocab_size, i);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

void LearnerService::Bind(LearnerWorker* worker, const config::RequestLimits& limits) {
  limits_.Set(limits);
  worker_.Bind(worker);
}

grpc::Status LearnerService::SftStep(grpc::ServerContext*, const v1::SftBatch* request,
                                     v1::TrainStats* response) {
  if (absl::Status s = CheckSft(*request, limits_.Get()); !s.ok()) return rpc::ToGrpc(s);
  return worker_.Unary(response, [&](LearnerWorker& w) { return w.SftStep(*request); });
}

grpc::Status LearnerService::TrainStep(grpc::ServerContext*, const v1::TrainBatch* request,
                                       v1::TrainStats* response) {
  if (absl::Status s = CheckTrain(*request, limits_.Get()); !s.ok()) return rpc::ToGrpc(s);
  return worker_.Unary(response, [&](LearnerWorker& w) { return w.TrainStep(*request); });
}

grpc::Status LearnerService::PublishWeights(grpc::ServerContext*, const v1::Empty*,
                                            v1::WeightSyncStats* response) {
  return worker_.Unary(response, [](LearnerWorker& w) { return w.PublishWeights(); });
}

grpc::Status LearnerService::SaveWeights(grpc::ServerContext*, const v1::PathRequest* request,
                                         v1::Empty*) {
  return EmptyReply(worker_, *request,
                    [](LearnerWorker& w, const std::string& p) { return w.SaveWeights(p); });
}

grpc::Status LearnerService::SaveCheckpoint(grpc::ServerContext*, const v1::PathRequest* request,
                                            v1::Empty*) {
  return EmptyReply(worker_, *request,
                    [](LearnerWorker& w, const std::string& p) { return w.SaveCheckpoint(p); });
}

grpc::Status LearnerService::RestoreCheckpoint(grpc::ServerContext*,
                                               const v1::PathRequest* request, v1::Empty*) {
  return EmptyReply(worker_, *request, [](LearnerWorker& w, const std::string& p) {
    return w.RestoreCheckpoint(p);
  });
}

grpc::Status LearnerService::GetVersion(grpc::ServerContext*, const v1::Empty*,
                                        v1::VersionResponse* response) {
  return worker_.Unary(response, [](LearnerWorker& w) -> absl::StatusOr<v1::VersionResponse> {
    v1::VersionResponse r;
    r.set_policy_version(w.policy_version());
    return r;
  });
}

grpc::Status LearnerService::PreferenceStep(grpc::ServerContext*,
                                            const v1::PreferenceBatch* request,
                                            v1::TrainStats* response) {
  if (absl::Status s = CheckPreference(*request, limits_.Get()); !s.ok()) {
    return rpc::ToGrpc(s);
  }
  return worker_.Unary(response, [&](LearnerWorker& w) { return w.PreferenceStep(*request); });
}

grpc::Status LearnerService::EvalSft(grpc::ServerContext*, const v1::SftBatch* request,
                                     v1::TrainStats* response) {
  if (absl::Status s = CheckSft(*request, limits_.Get()); !s.ok()) return rpc::ToGrpc(s);
  return worker_.Unary(response, [&](LearnerWorker& w) { return w.EvalSft(*request); });
}

grpc::Status LearnerService::EvalPreference(grpc::ServerContext*,
                                            const v1::PreferenceBatch* request,
                                            v1::TrainStats* response) {
  if (absl::Status s = CheckPreference(*request, limits_.Get()); !s.ok()) {
    return rpc::ToGrpc(s);
  }
  return worker_.Unary(response, [&](LearnerWorker& w) { return w.EvalPreference(*request); });
}

namespace {

class GrpcLearnerClient final : public LearnerWorker {
 public:
  GrpcLearnerClient(std::shared_ptr<grpc::Channel> channel, std::string worker_id,
                    absl::Duration timeout)
      : stub_(v1::Learner::NewStub(channel)), id_(std::move(worker_id)), timeout_(timeout) {}

  absl::StatusOr<v1::TrainStats> SftStep(const v1::SftBatch& batch) override {
    return Counted(Call(&v1::Learner::Stub::SftStep, batch, "SftStep"));
  }
  absl::StatusOr<v1::TrainStats> TrainStep(const v1::TrainBatch& batch) override {
    return Counted(Call(&v1::Learner::Stub::TrainStep, batch, "TrainStep"));
  }
  absl::StatusOr<v1::WeightSyncStats> PublishWeights() override {
    return Call(&v1::Learner::Stub::PublishWeights, v1::Empty(), "PublishWeights");
  }
  absl::Status SaveWeights(const std::string& path) override {
    return Call(&v1::Learner::Stub::SaveWeights, Path(path), "SaveWeights").status();
  }
  absl::Status SaveCheckpoint(const std::string& dir) override {
    return Call(&v1::Learner::Stub::SaveCheckpoint, Path(dir), "SaveCheckpoint").status();
  }
  absl::Status RestoreCheckpoint(const std::string& dir) override {
    absl::Status s =
        Call(&v1::Learner::Stub::RestoreCheckpoint, Path(dir), "RestoreCheckpoint").status();
    if (!s.ok()) return s;
    absl::StatusOr<v1::VersionResponse> v =
        Call(&v1::Learner::Stub::GetVersion, v1::Empty(), "GetVersion");
    if (!v.ok()) return v.status();
    version_ = v->policy_version();
    return absl::OkStatus();
  }
  int64_t policy_version() const override { return version_; }
  absl::StatusOr<v1::TrainStats> PreferenceStep(const v1::PreferenceBatch& batch) override {
    return Counted(Call(&v1::Learner::Stub::PreferenceStep, batch, "PreferenceStep"));
  }
  absl::StatusOr<v1::TrainStats> EvalSft(const v1::SftBatch& batch) override {
    return Call(&v1::Learner::Stub::EvalSft, batch, "EvalSft");
  }
  absl::StatusOr<v1::TrainStats> EvalPreference(const v1::PreferenceBatch& batch) override {
    return Call(&v1::Learner::Stub::EvalPreference, batch, "EvalPreference");
  }

 private:
  static v1::PathRequest Path(const std::string& path) {
    v1::PathRequest r;
    r.set_path(path);
    return r;
  }
  template <typename Request, typename Response>
  absl::StatusOr<Response> Call(grpc::Status (v1::Learner::Stub::*method)(grpc::ClientContext*,
                                                                         const Request&, Response*),
                                const Request& request, const char* name) {
    return rpc::Call(*stub_, method, request, timeout_, absl::StrCat(id_, " ", name));
  }
  // Every successful step is one optimizer step: one policy version more.
  absl::StatusOr<v1::TrainStats> Counted(absl::StatusOr<v1::TrainStats> stats) {
    if (stats.ok()) ++version_;
    return stats;
  }

  std::unique_ptr<v1::Learner::Stub> stub_;
  const std::string id_;
  const absl::Duration timeout_;
  int64_t version_ = 0;
};

}  // namespace

std::unique_ptr<LearnerWorker> NewGrpcLearnerClient(std::shared_ptr<grpc::Channel> channel,
                                                    std::string worker_id,
                                                    absl::Duration timeout) {
  return std::make_unique<GrpcLearnerClient>(std::move(channel), std::move(worker_id), timeout);
}

}  // namespace trellis::learner
