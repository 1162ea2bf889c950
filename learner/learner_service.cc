#include "learner/learner_service.h"

#include <grpcpp/grpcpp.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "env/confined_path.h"
#include "model/token_ids.h"
#include "rpc/channel.h"

namespace trellis::learner {
namespace {

// Runs a Status-returning call on the file `request` names inside
// `run_dir` into an Empty reply.
template <typename Fn>
grpc::Status EmptyReply(rpc::BoundWorker<LearnerWorker>& worker, const std::string& run_dir,
                        const v1::PathRequest& request, Fn fn) {
  absl::StatusOr<std::string> path = env::ConfinedPath(run_dir, request.path());
  if (!path.ok()) return rpc::ToGrpc(path.status());
  return rpc::ToGrpc(worker.Run([&](LearnerWorker& w) { return fn(w, *path); }));
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

LearnerService::LearnerService(std::string worker_id)
    : worker_(std::move(worker_id), model::StatusFromException) {
  const auto count = [this](const char* field) -> rpc::CountCheck {
    return [this, field](int64_t n) { return config::CheckBatchSize(field, n, limits_.Get()); };
  };
  constexpr char kLearner[] = "trellis.v1.Learner";
  constexpr int kPairs = v1::SftBatch::kPairsFieldNumber;
  CountUnary(kLearner, "SftStep", kPairs, count("pairs"), &LearnerService::SftStep);
  CountUnary(kLearner, "EvalSft", kPairs, count("pairs"), &LearnerService::EvalSft);
  CountUnary(kLearner, "TrainStep", v1::TrainBatch::kSamplesFieldNumber, count("samples"),
             &LearnerService::TrainStep);
  constexpr int kPreferencePairs = v1::PreferenceBatch::kPairsFieldNumber;
  CountUnary(kLearner, "PreferenceStep", kPreferencePairs, count("pairs"),
             &LearnerService::PreferenceStep);
  CountUnary(kLearner, "EvalPreference", kPreferencePairs, count("pairs"),
             &LearnerService::EvalPreference);
}

void LearnerService::Bind(LearnerWorker* worker, const config::RequestLimits& limits,
                    std::string run_dir) {
  limits_.Set(limits);
  {
    absl::MutexLock lock(&mu_);
    run_dir_ = std::move(run_dir);
  }
  worker_.Bind(worker);
}

std::string LearnerService::run_dir() const {
  absl::MutexLock lock(&mu_);
  return run_dir_;
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
  return EmptyReply(worker_, run_dir(), *request,
                    [](LearnerWorker& w, const std::string& p) { return w.SaveWeights(p); });
}

grpc::Status LearnerService::SaveCheckpoint(grpc::ServerContext*, const v1::PathRequest* request,
                                            v1::Empty*) {
  return EmptyReply(worker_, run_dir(), *request,
                    [](LearnerWorker& w, const std::string& p) { return w.SaveCheckpoint(p); });
}

grpc::Status LearnerService::RestoreCheckpoint(grpc::ServerContext*,
                                               const v1::PathRequest* request, v1::Empty*) {
  return EmptyReply(worker_, run_dir(), *request,
                    [](LearnerWorker& w, const std::string& p) { return w.RestoreCheckpoint(p); });
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
                    absl::Duration timeout, std::string run_dir)
      : stub_(v1::Learner::NewStub(channel)),
        id_(std::move(worker_id)),
        timeout_(timeout),
        run_dir_(std::move(run_dir)) {}

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
    return OnPath(&v1::Learner::Stub::SaveWeights, path, "SaveWeights");
  }
  absl::Status SaveCheckpoint(const std::string& dir) override {
    return OnPath(&v1::Learner::Stub::SaveCheckpoint, dir, "SaveCheckpoint");
  }
  absl::Status RestoreCheckpoint(const std::string& dir) override {
    absl::Status s = OnPath(&v1::Learner::Stub::RestoreCheckpoint, dir, "RestoreCheckpoint");
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
  // A call naming `path`, a file of the run directory, relative to it.
  absl::Status OnPath(grpc::Status (v1::Learner::Stub::*method)(grpc::ClientContext*,
                                                                const v1::PathRequest&, v1::Empty*),
                      const std::string& path, const char* name) {
    absl::StatusOr<std::string> relative = env::PathInside(run_dir_, path);
    if (!relative.ok()) return relative.status();
    v1::PathRequest request;
    request.set_path(*relative);
    return Call(method, request, name).status();
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
  const std::string run_dir_;
  int64_t version_ = 0;
};

}  // namespace

std::unique_ptr<LearnerWorker> NewGrpcLearnerClient(std::shared_ptr<grpc::Channel> channel,
                                                    std::string worker_id, absl::Duration timeout,
                                                    std::string run_dir) {
  return std::make_unique<GrpcLearnerClient>(std::move(channel), std::move(worker_id), timeout,
                                             std::move(run_dir));
}

}  // namespace trellis::learner
