#ifndef TRELLIS_REFERENCE_REFERENCE_SERVICE_H_
#define TRELLIS_REFERENCE_REFERENCE_SERVICE_H_

// The reference role over gRPC: the trellis.v1.Reference service around a
// ReferenceWorker, and a ReferenceWorker that calls one.

#include <memory>
#include <string>

#include <grpcpp/channel.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "config/request_limits.h"
#include "reference/reference_worker.h"
#include "model/torch_status.h"
#include "rpc/bound_worker.h"
#include "rpc/counted_request.h"
#include "trellis/v1/services.grpc.pb.h"

namespace trellis::reference {

class ReferenceService final : public rpc::CountingService<v1::Reference::Service> {
 public:
  explicit ReferenceService(std::string worker_id);
  // Requests are checked against `limits` (config/request_limits.h) before
  // they reach `worker`, their samples counted before they are parsed
  // (rpc/counted_request.h); token ids against limits.vocab_size. The paths of
  // Load names a file relative to `run_dir` and stay inside it
  // (env/confined_path.h): INVALID_ARGUMENT or PERMISSION_DENIED naming the
  // path otherwise.
  void Bind(ReferenceWorker* worker, const config::RequestLimits& limits, std::string run_dir);

  grpc::Status LogProbs(grpc::ServerContext*, const v1::LogProbRequest* request,
                        v1::LogProbResponse* response) override;
  grpc::Status Load(grpc::ServerContext*, const v1::PathRequest* request,
                    v1::Empty* response) override;
  grpc::Status Scores(grpc::ServerContext*, const v1::LogProbRequest* request,
                      v1::ScoreResponse* response) override;

 private:
  // The request's sizes (config/request_limits.h), then its token ids:
  // the first sample at fault is named.
  absl::Status CheckRequest(const v1::LogProbRequest& request) const;

  rpc::BoundWorker<ReferenceWorker> worker_;
  config::SharedLimits limits_;
  absl::Mutex mu_;
  std::string run_dir_ ABSL_GUARDED_BY(mu_);
};

// A ReferenceWorker calling the Reference service behind `channel` (named
// `worker_id` in errors); each call has `timeout`. Load's path must lie
// inside `run_dir` (the service's run directory as this process names it)
// and travels relative to it.
std::unique_ptr<ReferenceWorker> NewGrpcReferenceClient(std::shared_ptr<grpc::Channel> channel,
                                                        std::string worker_id,
                                                        absl::Duration timeout,
                                                        std::string run_dir);

}  // namespace trellis::reference

#endif  // TRELLIS_REFERENCE_REFERENCE_SERVICE_H_
