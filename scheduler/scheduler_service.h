#ifndef TRELLIS_SCHEDULER_SCHEDULER_SERVICE_H_
#define TRELLIS_SCHEDULER_SCHEDULER_SERVICE_H_

// The control plane over gRPC (trellis.v1.Scheduler): workers register and
// wait for their assignment, send heartbeats and their ledger records;
// clients submit, watch and cancel the job. One job per scheduler.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ledger/ledger.h"
#include "rpc/counted_request.h"
#include "scheduler/worker_registry.h"
#include "trellis/v1/scheduler.grpc.pb.h"

namespace trellis::scheduler {

class SchedulerService final : public rpc::CountingService<v1::Scheduler::Service> {
 public:
  // The job's WorkerRegistry keeps time on `env`. `run_dir` is the run
  // directory assignments name (made absolute); empty: the job's
  // runtime.out_dir.
  // A ledger report's records are counted before it is parsed
  // (rpc/counted_request.h).
  explicit SchedulerService(absl::Duration register_timeout, env::Env* env = env::Env::Default(),
                            std::string run_dir = "");

  // Sets the job (from the command line, or SubmitJob), prepared
  // (loop::PrepareJob: resolved from model.path) and with runtime.out_dir
  // the run directory when one was given: the job every worker is
  // assigned, as the run writes it to OUT/job.yaml. InvalidArgument when it
  // does not validate; FailedPrecondition when one is set already.
  [[nodiscard]] absl::Status SetJob(const v1::JobConfig& job);
  // Blocks until a job is set; returns it and its registry.
  std::pair<v1::JobConfig, WorkerRegistry*> WaitForJob();

  // Where forwarded ledger records go once the run's ledger is open
  // (records that arrive earlier are kept and replayed). Detaching (null)
  // first drains the workers: heartbeat replies name a step past the last,
  // and it waits until every live worker's heartbeat says its records for
  // it are sent (four heartbeat intervals at most).
  void AttachLedger(ledger::Ledger* ledger);
  void SetState(const std::string& state, const std::string& error = "");
  // Heartbeat replies tell workers to exit from now on.
  void BeginShutdown();
  bool cancel_requested() const;

  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest* request,
                        v1::Assignment* response) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override;
  grpc::Status ReportLedger(grpc::ServerContext*, const v1::LedgerReport* request,
                            v1::Empty* response) override;
  grpc::Status SubmitJob(grpc::ServerContext*, const v1::JobConfig* request,
                         v1::JobStatus* response) override;
  grpc::Status GetJobStatus(grpc::ServerContext*, const v1::JobStatusRequest* request,
                            v1::JobStatus* response) override;
  grpc::Status CancelJob(grpc::ServerContext*, const v1::JobStatusRequest* request,
                         v1::JobStatus* response) override;
  grpc::Status DrainWorker(grpc::ServerContext*, const v1::DrainRequest* request,
                           v1::Empty* response) override;

 private:
  v1::JobStatus StatusLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The step heartbeat replies name (workers send their records once it grows).
  int64_t StepLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DrainLedgerLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckJobId(const v1::JobStatusRequest& request) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration register_timeout_;
  env::Env* const env_;
  const std::string run_dir_;
  mutable absl::Mutex mu_;
  std::optional<v1::JobConfig> job_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<WorkerRegistry> registry_ ABSL_GUARDED_BY(mu_);
  ledger::Ledger* ledger_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::vector<v1::LedgerReport> pending_ ABSL_GUARDED_BY(mu_);
  // Each worker's ledger_step from its latest heartbeat.
  std::map<std::string, int64_t> ledger_steps_ ABSL_GUARDED_BY(mu_);
  // Set once the run's ledger is being detached (the drain's step).
  int64_t drain_step_ ABSL_GUARDED_BY(mu_) = -1;
  std::string state_ ABSL_GUARDED_BY(mu_) = "pending";
  std::string error_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  bool cancel_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace trellis::scheduler

#endif  // TRELLIS_SCHEDULER_SCHEDULER_SERVICE_H_
