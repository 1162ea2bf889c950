#include "scheduler/distributed_job.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "actor/actor_service.h"
#include "config/job_config.h"
#include "config/request_limits.h"
#include "config/worker_id.h"
#include "env/run_dir.h"
#include "learner/learner_service.h"
#include "reference/reference_service.h"
#include "roles/local_roles.h"
#include "rpc/call_stats.h"
#include "rpc/channel.h"
#include "rpc/server.h"
#include "run/job_runner.h"
#include "scheduler/actor_pool.h"
#include "scheduler/learner_group.h"
#include "scheduler/scheduler_service.h"
#include "verifier/verifier_service.h"
#include "web/watch_server.h"

namespace trellis::scheduler {
namespace {

// sampling.concurrency AUTO: the pool sizes each actor's decode batch,
// starting from decode_token_budget when the job sets one.
std::optional<ConcurrencyOptions> PoolConcurrency(const v1::SamplingConfig& sampling) {
  if (sampling.concurrency() != v1::SamplingConfig::AUTO) return std::nullopt;
  ConcurrencyOptions options;
  if (sampling.decode_token_budget() > 0) options.initial = sampling.decode_token_budget();
  return options;
}

// Every role a gRPC client of a registered worker; the actors behind a pool.
class RemoteRoleSet final : public run::RoleSet {
 public:
  static absl::StatusOr<std::unique_ptr<run::RoleSet>> Bind(const v1::JobConfig& job,
                                                            WorkerRegistry* registry,
                                                            absl::Duration register_timeout,
                                                            const std::string& run_dir,
                                                            env::Env* env, std::ostream* log) {
    if (absl::Status s = registry->WaitComplete(register_timeout, /*ready=*/true); !s.ok()) {
      return s;
    }
    const absl::Duration timeout = absl::Milliseconds(job.deployment().call_timeout_ms());
    // A call to a stalled worker stays open up to the stall timeout.
    const absl::Duration stall = absl::Milliseconds(job.deployment().stall_timeout_ms());
    auto channel = [stall](const WorkerInfo& w) { return rpc::NewChannel(w.request.address(), stall); };
    auto set = std::make_unique<RemoteRoleSet>();
    std::vector<ActorPool::Member> members;
    for (const WorkerInfo& w : registry->Workers(v1::ACTOR)) {
      members.push_back(
          {w.id, actor::NewGrpcActorClient(channel(w), w.id, timeout)});
    }
    set->actors_ = std::make_unique<ActorPool>(
        std::move(members), [registry](const std::string& id) { return registry->Alive(id); },
        [registry, log](const std::string& id) {
          if (registry->MarkDead(id) && log != nullptr) {
            *log << "scheduler: " << id << " declared dead (its calls failed)" << std::endl;
          }
        },
        log, PoolConcurrency(job.sampling()));
    // Actors join once they serve (their first heartbeat) and leave once
    // drained; the pool asks at each step's calls.
    set->actors_->SetChangeSource(
        [registry, channel, timeout](const std::vector<std::string>& serving) {
          ActorPool::Changes changes;
          for (const WorkerInfo& w : registry->Workers(v1::ACTOR)) {
            const bool member = std::find(serving.begin(), serving.end(), w.id) != serving.end();
            if (member && w.draining) changes.leaving.push_back(w.id);
            if (!member && w.ready && !w.dead && !w.draining && !w.released) {
              changes.joining.push_back(
                  {w.id, actor::NewGrpcActorClient(channel(w), w.id, timeout)});
            }
          }
          return changes;
        },
        [registry](const std::string& id) { registry->Release(id); });
    // A group of learners is one learner to the loop.
    std::vector<std::unique_ptr<learner::LearnerWorker>> learners;
    for (const WorkerInfo& w : registry->Workers(v1::LEARNER)) {
      learners.push_back(learner::NewGrpcLearnerClient(channel(w), w.id, timeout, run_dir));
    }
    set->learner_ = learners.size() == 1
                        ? std::move(learners.front())
                        : NewLearnerGroup(std::move(learners), job.memory().zero_stage() >= 2);
    const std::vector<WorkerInfo> references = registry->Workers(v1::REFERENCE);
    if (!references.empty()) {
      set->reference_ = reference::NewGrpcReferenceClient(channel(references.front()),
                                                          references.front().id, timeout, run_dir);
    }
    // Recipes that do not roll out start no verifier (loop::WorkersNeeded).
    const std::vector<WorkerInfo> verifiers = registry->Workers(v1::VERIFIER);
    if (!verifiers.empty()) {
      set->verifier_ = verifier::NewGrpcVerifierClient(channel(verifiers.front()),
                                                       verifiers.front().id, timeout);
    }
    // A multi-turn job's environment runs in the scheduler's process: the
    // loop sends each turn's action to it between the actors' rounds.
    absl::StatusOr<std::unique_ptr<environment::Environment>> environment =
        roles::MakeEnvironment(job.environment());
    if (!environment.ok()) return environment.status();
    set->environment_ = *std::move(environment);
    std::string table = "id\taddress\tpid\n";
    for (v1::Role role : {v1::LEARNER, v1::REFERENCE, v1::VERIFIER, v1::ACTOR}) {
      for (const WorkerInfo& w : registry->Workers(role)) {
        absl::StrAppend(&table, w.id, "\t", w.request.address(), "\t", w.request.pid(), "\n");
      }
    }
    if (absl::Status s = env->WriteFileAtomically(env::RunDir(run_dir).Workers(), table); !s.ok()) {
      return s;
    }
    return set;
  }

  loop::Roles roles() override {
    return loop::Roles{actors_.get(), learner_.get(), reference_.get(), verifier_.get(),
                       environment_.get()};
  }

  absl::Status Restore(const run::Checkpoint& checkpoint) override {
    return learner_->RestoreCheckpoint(checkpoint.dir);
  }

 private:
  std::unique_ptr<ActorPool> actors_;
  std::unique_ptr<learner::LearnerWorker> learner_;
  std::unique_ptr<reference::ReferenceWorker> reference_;
  std::unique_ptr<verifier::VerifierClient> verifier_;
  std::unique_ptr<environment::Environment> environment_;
};

absl::Status Serve(std::optional<v1::JobConfig> given_job, const std::string& out_dir,
                   const run::Checkpoint* resume, const SchedulerOptions& options,
                   std::ostream& progress) {
  SchedulerService service(options.register_timeout, options.env, out_dir);
  if (given_job.has_value()) {
    if (absl::Status s = service.SetJob(*given_job); !s.ok()) return s;
  }
  rpc::CallStats call_stats;
  rpc::ServerOptions serving;
  serving.advertise = options.advertise;
  serving.stats = &call_stats;
  serving.max_receive_bytes = config::MaxRequestBytes(v1::SCHEDULER);
  absl::StatusOr<std::unique_ptr<rpc::Server>> server =
      rpc::Server::Start(options.listen, {&service}, serving);
  if (!server.ok()) return server.status();
  (*server)->SetServing(true);
  if (!options.address_file.empty()) {
    if (absl::Status s =
            options.env->WriteFileAtomically(options.address_file, (*server)->address());
        !s.ok()) {
      return s;
    }
  }
  progress << "scheduler: listening on " << (*server)->address() << std::endl;

  auto [job, registry] = service.WaitForJob();
  const std::string out = out_dir.empty() ? job.runtime().out_dir() : out_dir;
  const v1::DeploymentConfig& d = job.deployment();
  absl::StatusOr<std::unique_ptr<web::WatchServer>> watch =
      web::StartRunWatch(options.http, out, job.name(), job.algorithm(), progress);
  if (!watch.ok()) return watch.status();
  if (*watch != nullptr) {
    (*watch)->AddMetrics(
        [&call_stats](ledger::PrometheusText& out) { call_stats.WriteMetrics(out); });
    (*watch)->SetWorkers([registry = registry] {
      std::vector<web::WorkerStatus> workers;
      for (v1::Role role : {v1::LEARNER, v1::REFERENCE, v1::VERIFIER, v1::ACTOR}) {
        for (const WorkerInfo& w : registry->Workers(role)) {
          workers.push_back(
              {w.id, config::RoleName(role), w.request.address(), !w.dead && !w.released});
        }
      }
      return workers;
    });
  }

  // Liveness: a worker silent past the heartbeat timeout is stalled and
  // waited for; silent past the stall timeout it is declared dead, once.
  absl::Notification done;
  std::thread monitor([&, registry = registry] {
    const SilenceLimits limits{absl::Milliseconds(d.heartbeat_timeout_ms()),
                               absl::Milliseconds(d.stall_timeout_ms())};
    while (!done.WaitForNotificationWithTimeout(absl::Milliseconds(d.heartbeat_interval_ms()))) {
      const SilenceChanges changes = registry->CheckSilence(limits);
      for (const WorkerInfo& w : changes.stalled) {
        progress << absl::StrFormat(
                        "scheduler: %s stalled (no heartbeat for %s); waiting for it up to %s\n",
                        w.id, absl::FormatDuration(limits.stall),
                        absl::FormatDuration(limits.dead))
                 << std::flush;
      }
      for (const WorkerInfo& w : changes.recovered) {
        progress << "scheduler: " << w.id << " is heartbeating again" << std::endl;
      }
      for (const WorkerInfo& w : changes.dead) {
        progress << absl::StrFormat("scheduler: %s declared dead (no heartbeat for %s)\n", w.id,
                                    absl::FormatDuration(limits.dead))
                 << std::flush;
      }
    }
  });

  service.SetState("running");
  run::RoleBinder bind = [&, registry = registry](const v1::JobConfig& j, const text::Tokenizer*,
                                                  ledger::Ledger*) {
    return RemoteRoleSet::Bind(j, registry, options.register_timeout, out, options.env, &progress);
  };
  absl::Status status = run::RunJob(
      job, out, resume, bind, progress,
      [&](ledger::Ledger* ledger) {
        service.AttachLedger(ledger);
        if (*watch != nullptr) (*watch)->Attach(ledger);
      },
      [&] { return service.cancel_requested(); }, options.env);
  service.SetState(status.ok()                ? "succeeded"
                   : absl::IsCancelled(status) ? "cancelled"
                                               : "failed",
                   std::string(status.message()));
  // Workers learn from their next heartbeat that the job is over.
  service.BeginShutdown();
  absl::SleepFor(absl::Milliseconds(2 * d.heartbeat_interval_ms()));
  done.Notify();
  monitor.join();
  (*server)->Shutdown(absl::Seconds(1));
  return status;
}

}  // namespace

absl::Status ServeScheduler(std::optional<v1::JobConfig> job, const std::string& out_dir,
                            const SchedulerOptions& options, std::ostream& progress) {
  return Serve(std::move(job), out_dir, nullptr, options, progress);
}

absl::Status ResumeScheduler(const std::string& run_dir, const SchedulerOptions& options,
                             std::ostream& progress) {
  absl::StatusOr<v1::JobConfig> job = config::LoadJobFile(env::RunDir(run_dir).JobYaml());
  if (!job.ok()) {
    return absl::Status(job.status().code(), absl::StrCat("resume: ", job.status().message()));
  }
  absl::StatusOr<run::Checkpoint> checkpoint = run::ReadLatestCheckpoint(options.env, run_dir);
  if (!checkpoint.ok()) return checkpoint.status();
  return Serve(*std::move(job), run_dir, &*checkpoint, options, progress);
}

}  // namespace trellis::scheduler
