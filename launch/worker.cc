#include "launch/worker.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <optional>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "actor/actor_service.h"
#include "comm/tcp_store.h"
#include "config/choice.h"
#include "config/job_config.h"
#include "config/request_limits.h"
#include "config/worker_id.h"
#include "launch/capabilities.h"
#include "launch/drain_signal.h"
#include "launch/ledger_forwarder.h"
#include "launch/weight_ends.h"
#include "learner/learner_service.h"
#include "ledger/ledger.h"
#include "ledger/memory_tracker.h"
#include "ledger/memory_limit.h"
#include "ledger/process_memory_proto.h"
#include "loop/prompt_format.h"
#include "model/device.h"
#include "model/token_ids.h"
#include "reference/reference_service.h"
#include "roles/local_roles.h"
#include "rpc/auth.h"
#include "rpc/call_stats.h"
#include "rpc/channel.h"
#include "rpc/server.h"
#include "run/run_dir_claim.h"
#include "text/tokenizer.h"
#include "trellis/v1/scheduler.grpc.pb.h"
#include "verifier/verifier_service.h"
#include "web/watch_server.h"
#include "weightsync/grpc_transport.h"

namespace trellis::launch {
namespace {

// The verifier a Verifier service serves, set once the job is known;
// before that every item is an ERROR saying so.
class DeferredVerifier final : public verifier::Verifier {
 public:
  void Set(std::unique_ptr<verifier::Verifier> verifier) {
    absl::MutexLock lock(&mu_);
    verifier_ = std::move(verifier);
  }
  v1::VerifyResult Verify(const v1::VerifyItem& item) const override {
    absl::ReaderMutexLock lock(&mu_);
    if (verifier_ == nullptr) {
      v1::VerifyResult r;
      r.set_verdict(v1::ERROR);
      r.set_detail("verifier: no assignment yet (the worker is still registering)");
      return r;
    }
    return verifier_->Verify(item);
  }
  std::vector<v1::VerifyResult> VerifyBatch(
      const google::protobuf::RepeatedPtrField<v1::VerifyItem>& items) const override {
    absl::ReaderMutexLock lock(&mu_);
    if (verifier_ == nullptr) return Verifier::VerifyBatch(items);
    return verifier_->VerifyBatch(items);
  }

 private:
  mutable absl::Mutex mu_;
  std::unique_ptr<verifier::Verifier> verifier_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<v1::Role> ParseRole(const std::string& name) {
  const std::optional<v1::Role> role = config::ParseChoice<v1::Role>(name);
  if (role == v1::ACTOR || role == v1::LEARNER || role == v1::REFERENCE || role == v1::VERIFIER) {
    return *role;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "role '", name, "': expected actor, learner, reference or verifier"));
}

absl::Status ServeWorker(const WorkerOptions& options, std::ostream& log) {
  const std::string role = config::RoleName(options.role);
  // The role's service starts first, so that its address can be registered.
  actor::ActorService actor_service(role);
  learner::LearnerService learner_service(role);
  reference::ReferenceService reference_service(role);
  auto deferred_verifier = std::make_shared<DeferredVerifier>();
  std::unique_ptr<v1::Verifier::Service> verifier_service;
  // The learner also serves its weights over gRPC, for jobs that ask for
  // the grpc transport.
  std::unique_ptr<weightsync::WeightStreamHost> weight_stream;
  std::vector<grpc::Service*> services;
  switch (options.role) {
    case v1::ACTOR: services = {&actor_service}; break;
    case v1::LEARNER:
      weight_stream = weightsync::NewWeightStreamHost();
      services = {&learner_service, weight_stream->service()};
      break;
    case v1::REFERENCE: services = {&reference_service}; break;
    case v1::VERIFIER:
      verifier_service = verifier::NewVerifierService(deferred_verifier);
      services = {verifier_service.get()};
      break;
    default: return absl::InvalidArgumentError("role: unspecified");
  }
  rpc::CallStats call_stats;
  rpc::ServerOptions serving;
  serving.advertise = options.advertise;
  serving.stats = &call_stats;
  serving.max_receive_bytes = config::MaxRequestBytes(options.role);
  absl::StatusOr<std::unique_ptr<rpc::Server>> server =
      rpc::Server::Start(options.listen, services, serving);
  if (!server.ok()) return server.status();
  // Every address this worker hands out names the host it advertises.
  const std::string host = rpc::SplitHostPort((*server)->address())->host;

  v1::RegisterRequest request;
  request.set_role(options.role);
  request.set_address((*server)->address());
  *request.mutable_capabilities() = Capabilities();
  request.set_pid(getpid());
  if (options.index.has_value()) request.set_index(*options.index);
  int transport_port = 0;
  int group_port = 0;
  if (options.role == v1::LEARNER) {
    transport_port = options.transport_port;
    if (transport_port == 0) {
      absl::StatusOr<int> port = comm::PickFreeTcpPort(host);
      if (!port.ok()) return port.status();
      transport_port = *port;
    }
    request.set_transport_address(absl::StrCat(host, ":", transport_port));
    // The store of the learner group, should this learner be its rank 0.
    absl::StatusOr<int> port = comm::PickFreeTcpPort(host);
    if (!port.ok()) return port.status();
    group_port = *port;
    request.set_group_address(absl::StrCat(host, ":", group_port));
  }

  std::shared_ptr<grpc::Channel> channel = rpc::NewChannel(options.scheduler);
  if (absl::Status s = rpc::WaitConnected(*channel, options.scheduler, absl::Seconds(30)); !s.ok()) {
    return s;
  }
  auto scheduler = v1::Scheduler::NewStub(channel);
  log << role << ": registering with " << options.scheduler << " from " << (*server)->address()
      << std::endl;
  absl::StatusOr<v1::Assignment> assignment =
      rpc::Call(*scheduler, &v1::Scheduler::Stub::Register, request, options.register_timeout,
                "scheduler Register");
  if (!assignment.ok()) return assignment.status();
  const v1::JobConfig& job = assignment->job();
  absl::StatusOr<config::WorkerId> assigned = config::WorkerId::Parse(assignment->worker_id());
  if (!assigned.ok()) return assigned.status();
  const std::string id = assigned->ToString();
  log << id << ": assigned (job '" << job.name() << "', transport "
      << assignment->transport().kind() << ")" << std::endl;
  // Its own view of the devices (CUDA_VISIBLE_DEVICES as `trellis launch`
  // set it from the placement), before anything is allocated.
  if (options.role != v1::VERIFIER) {
    if (absl::Status s = model::CheckDeviceVisible(job); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(id, ": ", s.message()));
    }
  }

  roles::SetThreads(job);
  run::ApplyRunDirAccess(job);  // for the checkpoints and weights it writes
  ledger::MemoryTracker::Install();
  // Declared before the ledger: it outlives the ledger's forwarding.
  LedgerForwarder forwarder(id, [&scheduler, &id, &log](const v1::LedgerReport& report) {
    absl::StatusOr<v1::Empty> sent = rpc::Call(*scheduler, &v1::Scheduler::Stub::ReportLedger,
                                               report, absl::Seconds(5), "scheduler ReportLedger");
    if (!sent.ok()) {
      log << id << ": " << report.records_size() << " ledger records lost: " << sent.status()
          << std::endl;
    }
    return sent.status();
  });
  ledger::Ledger ledger;
  ledger.ForwardRecords([&forwarder](std::string_view, const ledger::ForwardedRecord& record) {
    forwarder.Add(ToLedgerRecord(record));
  });
  // Declared after the ledger: it detaches from it when it goes.
  std::unique_ptr<web::WatchServer> metrics;
  if (!options.metrics.empty()) {
    web::WatchServer::Options watch;
    watch.listen = options.metrics;
    watch.dashboard = false;
    watch.worker = id;
    watch.role = role;
    absl::StatusOr<std::unique_ptr<web::WatchServer>> started = web::WatchServer::Start(watch);
    if (!started.ok()) return started.status();
    metrics = *std::move(started);
    metrics->Attach(&ledger);
    metrics->AddMetrics(
        [&call_stats](ledger::PrometheusText& out) { call_stats.WriteMetrics(out); });
    log << id << ": metrics on http://" << metrics->address() << "/metrics" << std::endl;
  }
  absl::StatusOr<std::unique_ptr<loop::PromptFormat>> format = loop::PromptFormat::ForJob(job);
  if (!format.ok()) return format.status();
  const text::Tokenizer* tokenizer = &(*format)->tokenizer();
  const int64_t vocab = model::VocabSize(job.model(), tokenizer->vocab_size());
  const config::RequestLimits limits = config::RequestLimitsFor(job.model(), vocab);
  absl::StatusOr<WeightEnds> ends =
      MakeWeightEnds(*assignment, options.role, host, transport_port, weight_stream.get());
  if (!ends.ok()) return ends.status();
  std::unique_ptr<weightsync::Publisher> publisher = std::move(ends->publisher);
  std::unique_ptr<weightsync::Receiver> receiver = std::move(ends->receiver);
  std::unique_ptr<learner::LearnerWorker> learner;
  std::unique_ptr<actor::RolloutWorker> actor;
  std::unique_ptr<reference::ReferenceWorker> reference;
  const v1::LearnerGroupAssignment& group = assignment->learner_group();
  // Whatever happens from here, the server stops before the publisher goes
  // (the learner's WeightStream host serves it).
  absl::Cleanup stop_server = [&server] { (*server)->Shutdown(absl::Seconds(1)); };
  switch (options.role) {
    case v1::ACTOR: {
      absl::StatusOr<std::unique_ptr<actor::RolloutWorker>> a = roles::MakeLocalActor(
          job, tokenizer, receiver.get(), &ledger, id, model::Binding::kServed);
      if (!a.ok()) return a.status();
      actor = *std::move(a);
      actor_service.Bind(actor.get(), limits);
      break;
    }
    case v1::LEARNER: {
      learner::GroupMember member;
      member.rank = group.rank();
      member.size = std::max(1, group.size());
      member.local_host = host;
      member.secret = rpc::ProcessSecret().value();
      if (member.size > 1) {
        absl::StatusOr<rpc::HostPort> store = rpc::SplitHostPort(group.store_address());
        if (!store.ok()) return store.status();
        member.store_host = store->host;
        member.store_port = store->port;
      }
      absl::StatusOr<std::unique_ptr<learner::LearnerWorker>> l = roles::MakeLocalLearner(
          job, *tokenizer, publisher.get(), &ledger, id, member, model::Binding::kServed);
      if (!l.ok()) return l.status();
      learner = *std::move(l);
      learner_service.Bind(learner.get(), limits, assignment->run_dir());
      break;
    }
    case v1::REFERENCE: {
      absl::StatusOr<std::unique_ptr<reference::ReferenceWorker>> r = reference::NewLocalReference(
          job, tokenizer, &ledger, model::RoleDevice(job, v1::REFERENCE, model::Binding::kServed),
          nullptr, model::RankDevices(job, v1::REFERENCE, model::Binding::kServed));
      if (!r.ok()) return r.status();
      reference = *std::move(r);
      reference_service.Bind(reference.get(), limits, assignment->run_dir());
      break;
    }
    case v1::VERIFIER: {
      absl::StatusOr<std::unique_ptr<verifier::Verifier>> v = roles::MakeVerifier(job.verifier());
      if (!v.ok()) return v.status();
      deferred_verifier->Set(*std::move(v));
      break;
    }
    default: break;
  }
  (*server)->SetServing(true);
  log << id << ": serving on " << (*server)->address() << std::endl;
  if (options.role == v1::ACTOR) DrainOnSigterm();

  // Heartbeats until the scheduler says the job is over (or, to a draining
  // actor, that it is released), or stays silent past the job's stall
  // timeout (warned of at the heartbeat timeout: a stopped scheduler is
  // waited for; a draining actor leaves at once, having no one to hand to).
  const absl::Duration interval = absl::Milliseconds(assignment->heartbeat_interval_ms());
  const absl::Duration warn_after = absl::Milliseconds(job.deployment().heartbeat_timeout_ms());
  const absl::Duration give_up_after = absl::Milliseconds(job.deployment().stall_timeout_ms());
  absl::Time last_ok = absl::Now();
  // answered: the scheduler has a heartbeat (counts it ready); drain_known:
  // it has one saying draining (no new work from the next step on).
  bool warned = false, answered = false, drain_known = false;
  absl::Status result;
  v1::HeartbeatRequest beat;
  beat.set_worker_id(id);
  while (true) {
    beat.set_draining(DrainRequested());
    beat.set_ledger_step(forwarder.delivered_step());
    absl::StatusOr<v1::HeartbeatResponse> reply = rpc::Call(
        *scheduler, &v1::Scheduler::Stub::Heartbeat, beat, interval, "scheduler Heartbeat");
    if (reply.ok()) {
      if (warned) log << id << ": scheduler answers again" << std::endl;
      if (!answered) log << id << ": ready (heartbeat answered)" << std::endl;
      if (beat.draining() && !drain_known) {
        log << id << ": draining (SIGTERM): no new work from the next step; leaving once released"
            << std::endl;
      }
      drain_known = beat.draining();
      warned = false;
      answered = true;
      last_ok = absl::Now();
      const ledger::ProcessMemoryAccount account = ledger.ProcessAccount();
      forwarder.SetProcess(ledger::ProcessMemoryToProto(account));
      forwarder.StepAdvanced(reply->step());
      if (reply->shutdown()) break;
      // memory.process_memory_limit_bytes: the high-water mark since start.
      result = ledger::CheckProcessMemoryLimit(ledger, job.memory().process_memory_limit_bytes(),
                                               id, account.peak_resident_bytes);
      if (!result.ok()) break;
    } else if (absl::IsFailedPrecondition(reply.status()) || absl::IsNotFound(reply.status())) {
      result = reply.status();  // Declared dead: our work went elsewhere.
      break;
    } else if (DrainRequested()) {
      result = absl::UnavailableError(absl::StrCat(id, ": draining; scheduler gone: ",
                                                   reply.status().message()));
      break;
    } else if (absl::Now() - last_ok > give_up_after) {
      result = absl::UnavailableError(absl::StrCat(id, ": scheduler ", options.scheduler,
                                                   " silent for ",
                                                   absl::FormatDuration(give_up_after)));
      break;
    } else if (!warned && absl::Now() - last_ok > warn_after) {
      warned = true;
      log << id << ": scheduler " << options.scheduler << " silent for "
          << absl::FormatDuration(warn_after) << "; waiting for it up to "
          << absl::FormatDuration(give_up_after) << std::endl;
    }
    absl::SleepFor(interval);
  }
  log << id << ": " << (!result.ok() ? std::string(result.message())
                        : beat.draining() ? "drained and released, exiting"
                                          : "job over, exiting")
      << std::endl;
  std::move(stop_server).Invoke();
  actor_service.Bind(nullptr, config::RequestLimits());
  learner_service.Bind(nullptr, config::RequestLimits(), "");
  reference_service.Bind(nullptr, config::RequestLimits(), "");
  // What is still buffered goes before the worker stops.
  ledger.ForwardRecords(nullptr);
  forwarder.SetProcess(ledger::ProcessMemoryToProto(ledger.ProcessAccount()));
  const LedgerForwarder::Counts counts = forwarder.Close();
  log << id << ": ledger records: " << counts.recorded << " made, " << counts.sent << " sent in "
      << counts.calls << " calls, " << counts.dropped << " dropped, " << counts.lost << " lost"
      << std::endl;
  return result;
}

}  // namespace trellis::launch
