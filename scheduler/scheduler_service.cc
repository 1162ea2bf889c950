#include "scheduler/scheduler_service.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "config/job_config.h"
#include "config/rank_memory.h"
#include "config/request_limits.h"
#include "ledger/process_memory_proto.h"
#include "loop/recipe.h"
#include "rpc/status.h"
#include "weightsync/grpc_transport.h"

namespace trellis::scheduler {
namespace {

// Why the scheduler's ledger cannot take `r`, records[i] of a report,
// naming the field; OK when it can (then every name in it is known).
absl::Status CheckRecord(const v1::LedgerRecord& r, int i) {
  const std::string where = absl::StrCat("records[", i, "].");
  const auto unknown = [&where](const char* field, const char* what, const std::string& name) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, field, ": unknown ", what, " '", name, "'"));
  };
  switch (r.record_case()) {
    case v1::LedgerRecord::kObject:
      if (!ledger::ObjectFromName(r.object().object())) {
        return unknown("object.object", "object", r.object().object());
      }
      if (!ledger::StageFromName(r.object().stage())) {
        return unknown("object.stage", "stage", r.object().stage());
      }
      return ledger::CheckReportedBytes(where + "object.bytes", r.object().bytes());
    case v1::LedgerRecord::kMove: {
      const v1::MoveRecord& m = r.move();
      if (!ledger::ObjectFromName(m.object())) return unknown("move.object", "object", m.object());
      if (!ledger::MoveDirectionFromName(m.direction())) {
        return absl::InvalidArgumentError(absl::StrCat(where, "move.direction: unknown direction '",
                                                       m.direction(), "' (expected out or in)"));
      }
      if (!ledger::StageFromName(m.stage())) return unknown("move.stage", "stage", m.stage());
      if (absl::Status s = ledger::CheckReportedBytes(where + "move.bytes", m.bytes()); !s.ok()) return s;
      if (!std::isfinite(m.seconds()) || m.seconds() < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, "move.seconds: must be finite and >= 0, found ", m.seconds()));
      }
      return absl::OkStatus();
    }
    case v1::LedgerRecord::RECORD_NOT_SET: break;
  }
  return absl::InvalidArgumentError(absl::StrCat("records[", i, "]: empty"));
}

// Replays a report CheckRecord and ProcessMemoryFromProto accepted whole,
// each record with the worker's id as its role; the worker's objects are
// another process's, so no peak the scheduler measures is attributed to
// them. Its process memory replaces the one it sent before.
void Record(ledger::Ledger& ledger, const v1::LedgerReport& report) {
  const std::string& role = report.worker_id();
  for (const v1::LedgerRecord& r : report.records()) {
    if (r.has_move()) {
      const v1::MoveRecord& m = r.move();
      ledger.RecordMove(role, *ledger::ObjectFromName(m.object()),
                        *ledger::MoveDirectionFromName(m.direction()), m.bytes(), m.seconds(),
                        *ledger::StageFromName(m.stage()));
      continue;
    }
    const v1::ObjectRecord& o = r.object();
    ledger.RecordRemoteObject(role, *ledger::ObjectFromName(o.object()), o.bytes(),
                              *ledger::StageFromName(o.stage()));
  }
  if (!report.has_process()) return;
  if (absl::StatusOr<ledger::ProcessMemoryAccount> process =
          ledger::ProcessMemoryFromProto(report.process(), "process.");
      process.ok()) {
    ledger.RecordRemoteProcess(role, *process);
  }
}

// Whether receivers reach the job's weight transport on the learner's gRPC
// server (grpc) rather than at a port of its own (gloo). A transport no
// launched worker offers reads false: the workers refuse it, naming it.
bool OnLearnerServer(const std::string& transport) {
  static const absl::StatusOr<weightsync::TransportRegistry>* const transports =
      new absl::StatusOr<weightsync::TransportRegistry>(weightsync::LaunchedTransports(nullptr));
  if (!transports->ok()) return false;
  const absl::StatusOr<weightsync::Endpoint> endpoint = (*transports)->EndpointOf(transport);
  return endpoint.ok() && *endpoint == weightsync::Endpoint::kLearnerServer;
}

}  // namespace

SchedulerService::SchedulerService(absl::Duration register_timeout, env::Env* env,
                                   std::string run_dir)
    : register_timeout_(register_timeout), env_(env), run_dir_(std::move(run_dir)) {
  CountUnary(
      "trellis.v1.Scheduler", "ReportLedger", v1::LedgerReport::kRecordsFieldNumber,
      [](int64_t n) { return config::CheckLedgerRecordCount(n, config::RequestLimits()); },
      &SchedulerService::ReportLedger);
}

absl::Status SchedulerService::SetJob(const v1::JobConfig& job) {
  v1::JobConfig validated = job;
  if (absl::Status s = loop::PrepareJob(&validated); !s.ok()) return s;
  // The job every worker is assigned is the one the run writes (run::RunJob).
  if (!run_dir_.empty()) validated.mutable_runtime()->set_out_dir(run_dir_);
  absl::MutexLock lock(&mu_);
  if (job_.has_value()) {
    return absl::FailedPreconditionError("this scheduler already runs a job");
  }
  job_ = validated;
  registry_ = std::make_unique<WorkerRegistry>(validated, env_);
  const std::string& transport = validated.deployment().weight_transport();
  if (!OnLearnerServer(transport)) {
    registry_->RefuseJoiners(absl::StrCat(
        "deployment.weight_transport is ", transport, ", whose receiver slots are fixed at "
        "deployment.actor.count; actors join a running job over grpc"));
  }
  state_ = "placing";
  return absl::OkStatus();
}

std::pair<v1::JobConfig, WorkerRegistry*> SchedulerService::WaitForJob() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](std::optional<v1::JobConfig>* job) { return job->has_value(); }, &job_));
  return {*job_, registry_.get()};
}

void SchedulerService::AttachLedger(ledger::Ledger* ledger) {
  absl::MutexLock lock(&mu_);
  if (ledger == nullptr && ledger_ != nullptr && registry_ != nullptr) DrainLedgerLocked();
  ledger_ = ledger;
  if (ledger == nullptr) return;
  for (const v1::LedgerReport& report : pending_) Record(*ledger, report);
  pending_.clear();
}

void SchedulerService::DrainLedgerLocked() {
  // A step past the last: every worker sends what it holds and says so in
  // its next heartbeat. A worker that dies meanwhile is waited for no longer
  // than a few heartbeats.
  drain_step_ = StepLocked() + 1;
  const std::vector<std::string> live = registry_->LiveIds();
  const auto drained = [this, &live]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const std::string& id : live) {
      auto it = ledger_steps_.find(id);
      if (it == ledger_steps_.end() || it->second < drain_step_) return false;
    }
    return true;
  };
  mu_.AwaitWithTimeout(absl::Condition(&drained),
                       4 * absl::Milliseconds(job_->deployment().heartbeat_interval_ms()));
}

int64_t SchedulerService::StepLocked() const {
  if (drain_step_ >= 0) return drain_step_;
  return ledger_ == nullptr ? 0 : std::max<int64_t>(0, ledger_->current_step());
}

void SchedulerService::SetState(const std::string& state, const std::string& error) {
  absl::MutexLock lock(&mu_);
  state_ = state;
  error_ = error;
}

void SchedulerService::BeginShutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
}

bool SchedulerService::cancel_requested() const {
  absl::MutexLock lock(&mu_);
  return cancel_;
}

grpc::Status SchedulerService::Register(grpc::ServerContext*, const v1::RegisterRequest* request,
                                        v1::Assignment* response) {
  WorkerRegistry* registry = nullptr;
  v1::JobConfig job;
  {
    absl::MutexLock lock(&mu_);
    if (!job_.has_value()) {
      return rpc::ToGrpc(absl::UnavailableError("no job yet: submit one, then register"));
    }
    registry = registry_.get();
    job = *job_;
  }
  absl::StatusOr<std::string> id = registry->Add(*request);
  if (!id.ok()) return rpc::ToGrpc(id.status());
  // Every worker's assignment depends on the others (the learner's
  // transport address), so registration completes for all at once.
  if (absl::Status s = registry->WaitComplete(register_timeout_); !s.ok()) {
    return rpc::ToGrpc(s);
  }
  const v1::DeploymentConfig& d = job.deployment();
  response->set_worker_id(*id);
  *response->mutable_job() = job;
  std::error_code ec;
  response->set_run_dir(
      std::filesystem::absolute(job.runtime().out_dir(), ec).lexically_normal().string());
  response->set_heartbeat_interval_ms(d.heartbeat_interval_ms());
  response->set_node(request->capabilities().hostname());
  *response->mutable_gpus() = request->capabilities().gpus();
  v1::TransportAssignment* t = response->mutable_transport();
  t->set_kind(d.weight_transport());
  t->set_bucket_bytes(d.bucket_bytes());
  t->set_num_receivers(registry->Expected(v1::ACTOR));
  const std::vector<WorkerInfo> learners = registry->Workers(v1::LEARNER);
  if (!learners.empty()) {
    const v1::RegisterRequest& learner = learners.front().request;
    t->set_address(OnLearnerServer(d.weight_transport()) ? learner.address()
                                                         : learner.transport_address());
  }
  t->set_receiver_index(-1);
  if (config::ReshardsWeights(job)) {
    // Every learner rank lists its links to the actor ranks.
    std::vector<const WorkerInfo*> ranks;
    for (const WorkerInfo& w : learners) ranks.push_back(&w);
    std::sort(ranks.begin(), ranks.end(),
              [](const WorkerInfo* a, const WorkerInfo* b) { return a->index < b->index; });
    for (const WorkerInfo* w : ranks) t->add_reshard_addresses(w->request.transport_address());
  }
  if (request->role() == v1::LEARNER) {
    v1::LearnerGroupAssignment* g = response->mutable_learner_group();
    g->set_size(static_cast<int32_t>(learners.size()));
    for (const WorkerInfo& w : learners) {
      if (w.id == *id) g->set_rank(w.index);
    }
    if (learners.size() > 1) g->set_store_address(learners.front().request.group_address());
  }
  if (request->role() == v1::ACTOR) {
    for (const WorkerInfo& w : registry->Workers(v1::ACTOR)) {
      if (w.id == *id) t->set_receiver_index(w.index);
    }
  }
  return grpc::Status::OK;
}

grpc::Status SchedulerService::Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* request,
                                         v1::HeartbeatResponse* response) {
  if (absl::Status s = config::CheckWorkerId(request->worker_id(), config::RequestLimits());
      !s.ok()) {
    return rpc::ToGrpc(s);
  }
  WorkerRegistry* registry = nullptr;
  {
    absl::MutexLock lock(&mu_);
    response->set_shutdown(shutdown_);
    response->set_step(StepLocked());
    ledger_steps_[request->worker_id()] = request->ledger_step();
    registry = registry_.get();
  }
  if (registry == nullptr) return rpc::ToGrpc(absl::FailedPreconditionError("no job yet"));
  if (absl::Status s = registry->Heartbeat(request->worker_id()); !s.ok()) return rpc::ToGrpc(s);
  if (request->draining()) {
    // Once released it may say so again until it exits.
    if (absl::Status s = registry->Drain(request->worker_id());
        !s.ok() && !registry->Released(request->worker_id())) {
      return rpc::ToGrpc(s);
    }
  }
  if (registry->Released(request->worker_id())) response->set_shutdown(true);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::DrainWorker(grpc::ServerContext*, const v1::DrainRequest* request,
                                           v1::Empty*) {
  if (absl::Status s = config::CheckWorkerId(request->worker_id(), config::RequestLimits());
      !s.ok()) {
    return rpc::ToGrpc(s);
  }
  WorkerRegistry* registry = nullptr;
  {
    absl::MutexLock lock(&mu_);
    registry = registry_.get();
  }
  if (registry == nullptr) return rpc::ToGrpc(absl::FailedPreconditionError("no job yet"));
  return rpc::ToGrpc(registry->Drain(request->worker_id()));
}

grpc::Status SchedulerService::ReportLedger(grpc::ServerContext*, const v1::LedgerReport* request,
                                            v1::Empty*) {
  // Bounded before anything is kept: one record is one ledger.jsonl line.
  if (absl::Status s = config::CheckLedgerReport(*request, config::RequestLimits()); !s.ok()) {
    return rpc::ToGrpc(s);
  }
  // All or none: a batch is checked whole, then recorded in its order.
  for (int i = 0; i < request->records_size(); ++i) {
    if (absl::Status s = CheckRecord(request->records(i), i); !s.ok()) {
      return rpc::ToGrpc(absl::Status(
          s.code(), absl::StrCat("ledger report of ", request->worker_id(), ": ", s.message())));
    }
  }
  if (request->has_process()) {
    if (absl::Status s = ledger::ProcessMemoryFromProto(request->process(), "process.").status();
        !s.ok()) {
      return rpc::ToGrpc(absl::Status(
          s.code(), absl::StrCat("ledger report of ", request->worker_id(), ": ", s.message())));
    }
  }
  // Under the lock: the ledger may be detached at the end of the run.
  absl::MutexLock lock(&mu_);
  if (ledger_ == nullptr) {
    pending_.push_back(*request);
  } else {
    Record(*ledger_, *request);
    // A ledger that can no longer write (a full disk) refuses the report
    // with its error, naming ledger.jsonl: the worker counts the records
    // lost, and the run stops before its next step (run::RunJob).
    if (absl::Status s = ledger_->status(); !s.ok()) return rpc::ToGrpc(s);
  }
  return grpc::Status::OK;
}

v1::JobStatus SchedulerService::StatusLocked() const {
  v1::JobStatus status;
  if (job_.has_value()) {
    status.set_job_id(job_->name());
    status.set_steps(loop::RecipeSteps(*job_));
  }
  status.set_state(state_);
  status.set_error(error_);
  if (ledger_ != nullptr) status.set_step(std::max<int64_t>(0, ledger_->current_step()));
  if (registry_ != nullptr) {
    for (const std::string& id : registry_->LiveIds()) status.add_workers(id);
  }
  return status;
}

absl::Status SchedulerService::CheckJobId(const v1::JobStatusRequest& request) const {
  if (!job_.has_value()) return absl::FailedPreconditionError("no job has been submitted");
  if (request.job_id() != job_->name()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job_id: unknown job '", request.job_id(), "' (this scheduler runs another)"));
  }
  return absl::OkStatus();
}

grpc::Status SchedulerService::SubmitJob(grpc::ServerContext*, const v1::JobConfig* request,
                                         v1::JobStatus* response) {
  if (absl::Status s = SetJob(*request); !s.ok()) return rpc::ToGrpc(s);
  absl::MutexLock lock(&mu_);
  *response = StatusLocked();
  return grpc::Status::OK;
}

grpc::Status SchedulerService::GetJobStatus(grpc::ServerContext*,
                                            const v1::JobStatusRequest* request,
                                            v1::JobStatus* response) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckJobId(*request); !s.ok()) return rpc::ToGrpc(s);
  *response = StatusLocked();
  return grpc::Status::OK;
}

grpc::Status SchedulerService::CancelJob(grpc::ServerContext*, const v1::JobStatusRequest* request,
                                         v1::JobStatus* response) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckJobId(*request); !s.ok()) return rpc::ToGrpc(s);
  cancel_ = true;
  *response = StatusLocked();
  return grpc::Status::OK;
}

}  // namespace trellis::scheduler
