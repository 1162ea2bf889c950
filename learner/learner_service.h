#ifndef TRELLIS_LEARNER_LEARNER_SERVICE_H_
#define TRELLIS_LEARNER_LEARNER_SERVICE_H_

// The learner role over gRPC: the trellis.v1.Learner service around a
// LearnerWorker, and a LearnerWorker that calls one.

#include <memory>
#include <string>

#include <grpcpp/channel.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "config/request_limits.h"
#include "learner/learner_worker.h"
#include "model/torch_status.h"
#include "rpc/bound_worker.h"
#include "rpc/counted_request.h"
#include "trellis/v1/services.grpc.pb.h"

namespace trellis::learner {

class LearnerService final : public rpc::CountingService<v1::Learner::Service> {
 public:
  explicit LearnerService(std::string worker_id);
  // Requests are checked against `limits` (config/request_limits.h) before
  // they reach `worker`, a batch's samples or pairs counted before it is
  // parsed (rpc/counted_request.h); token ids against limits.vocab_size. The paths of
  // SaveWeights, SaveCheckpoint and RestoreCheckpoint name files relative to `run_dir` and stay inside it
  // (env/confined_path.h): INVALID_ARGUMENT or PERMISSION_DENIED naming the
  // path otherwise.
  void Bind(LearnerWorker* worker, const config::RequestLimits& limits, std::string run_dir);

  grpc::Status SftStep(grpc::ServerContext*, const v1::SftBatch* request,
                       v1::TrainStats* response) override;
  grpc::Status TrainStep(grpc::ServerContext*, const v1::TrainBatch* request,
                         v1::TrainStats* response) override;
  grpc::Status PublishWeights(grpc::ServerContext*, const v1::Empty* request,
                              v1::WeightSyncStats* response) override;
  grpc::Status SaveWeights(grpc::ServerContext*, const v1::PathRequest* request,
                           v1::Empty* response) override;
  grpc::Status SaveCheckpoint(grpc::ServerContext*, const v1::PathRequest* request,
                              v1::Empty* response) override;
  grpc::Status RestoreCheckpoint(grpc::ServerContext*, const v1::PathRequest* request,
                                 v1::Empty* response) override;
  grpc::Status GetVersion(grpc::ServerContext*, const v1::Empty* request,
                          v1::VersionResponse* response) override;
  grpc::Status PreferenceStep(grpc::ServerContext*, const v1::PreferenceBatch* request,
                              v1::TrainStats* response) override;
  grpc::Status EvalSft(grpc::ServerContext*, const v1::SftBatch* request,
                       v1::TrainStats* response) override;
  grpc::Status EvalPreference(grpc::ServerContext*, const v1::PreferenceBatch* request,
                              v1::TrainStats* response) override;

 private:
  std::string run_dir() const;

  rpc::BoundWorker<LearnerWorker> worker_;
  config::SharedLimits limits_;
  mutable absl::Mutex mu_;
  std::string run_dir_ ABSL_GUARDED_BY(mu_);
};

// A LearnerWorker calling the Learner service behind `channel` (named
// `worker_id` in errors); each call has `timeout`. Paths it is given must
// lie inside `run_dir` (the service's run directory as this process names
// it) and travel relative to it.
std::unique_ptr<LearnerWorker> NewGrpcLearnerClient(std::shared_ptr<grpc::Channel> channel,
                                                    std::string worker_id, absl::Duration timeout,
                                                    std::string run_dir);

}  // namespace trellis::learner

#endif  // TRELLIS_LEARNER_LEARNER_SERVICE_H_
