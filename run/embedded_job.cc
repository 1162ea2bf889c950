#include "run/embedded_job.h"

#include "absl/strings/str_cat.h"
#include "config/job_config.h"
#include "config/rank_memory.h"
#include "config/worker_id.h"
#include "env/run_dir.h"
#include "ledger/cuda_memory.h"
#include "model/device.h"
#include "roles/local_roles.h"
#include "run/checkpoint.h"
#include "run/job_runner.h"
#include "weightsync/inprocess_transport.h"

namespace trellis::run {
namespace {

// A CUDA job's devices in the ledger (docs/gpu.md, "The ledger on CUDA"):
// each visible device's caching allocator, its peaks attributed to the
// objects of the roles computing on it (model::RoleDevice). Embedded runs
// only: a launched run's scheduler computes on no device.
absl::Status AddDeviceMemory(const v1::JobConfig& job, ledger::Ledger* ledger) {
  if (job.runtime().device() != v1::RuntimeConfig::CUDA) return absl::OkStatus();
  absl::StatusOr<std::vector<std::unique_ptr<ledger::MemorySource>>> devices =
      ledger::CudaMemoryOfEveryDevice();
  if (!devices.ok()) return devices.status();
  for (size_t i = 0; i < devices->size(); ++i) {
    std::vector<std::string> roles;
    for (const v1::Role role : {v1::LEARNER, v1::ACTOR, v1::REFERENCE}) {
      if (model::RoleDevice(job, role, model::Binding::kEmbedded).index == static_cast<int>(i)) {
        roles.push_back(config::WorkerId(role).ToString());
      }
    }
    if (roles.empty()) continue;  // No role of this run computes there.
    ledger->AddDeviceMemory(std::move((*devices)[i]), std::move(roles));
  }
  return absl::OkStatus();
}

class LocalRoleSet final : public RoleSet {
 public:
  static absl::StatusOr<std::unique_ptr<RoleSet>> Bind(const v1::JobConfig& job,
                                                       const text::Tokenizer* tokenizer,
                                                       ledger::Ledger* ledger) {
    // memory.process_memory_limit_bytes: every role in this one process.
    if (absl::Status s = config::CheckProcessMemoryLimit(job, config::ProcessLayout::kEmbedded);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = AddDeviceMemory(job, ledger); !s.ok()) return s;
    auto set = std::make_unique<LocalRoleSet>();
    absl::StatusOr<std::unique_ptr<verifier::Verifier>> verifier = roles::MakeVerifier(job.verifier());
    if (!verifier.ok()) return verifier.status();
    set->verifier_ = verifier::NewLocalVerifierClient(*std::move(verifier));
    set->publisher_ = weightsync::NewInProcessPublisher();
    set->receiver_ = set->publisher_->NewReceiver();
    // Under LoRA the learner holds the frozen base the actor and the
    // reference read (model/shared_base.h).
    const std::shared_ptr<model::SharedBase> base = roles::ProcessSharedBase(job);
    absl::StatusOr<std::unique_ptr<learner::LearnerWorker>> learner =
        roles::MakeLocalLearner(job, *tokenizer, set->publisher_.get(), ledger,
                                config::WorkerId(v1::LEARNER).ToString(), {},
                                model::Binding::kEmbedded, base);
    if (!learner.ok()) return learner.status();
    set->learner_ = *std::move(learner);
    absl::StatusOr<std::unique_ptr<actor::RolloutWorker>> actor =
        roles::MakeLocalActor(job, tokenizer, set->receiver_.get(), ledger,
                              config::WorkerId(v1::ACTOR).ToString(), model::Binding::kEmbedded,
                              base);
    if (!actor.ok()) return actor.status();
    set->actor_ = *std::move(actor);
    absl::StatusOr<std::unique_ptr<reference::ReferenceWorker>> reference =
        roles::MakeLocalReference(job, tokenizer, ledger, model::Binding::kEmbedded, base);
    if (!reference.ok()) return reference.status();
    set->reference_ = *std::move(reference);
    absl::StatusOr<std::unique_ptr<environment::Environment>> environment =
        roles::MakeEnvironment(job.environment());
    if (!environment.ok()) return environment.status();
    set->environment_ = *std::move(environment);
    return set;
  }

  loop::Roles roles() override {
    return loop::Roles{actor_.get(), learner_.get(), reference_.get(), verifier_.get(),
                       environment_.get()};
  }

  absl::Status Restore(const Checkpoint& checkpoint) override {
    if (absl::Status s = learner_->RestoreCheckpoint(checkpoint.dir); !s.ok()) return s;
    // Last: building the roles drew from the global generator.
    return RestoreGlobalRng(checkpoint.dir);
  }

 private:
  std::unique_ptr<verifier::VerifierClient> verifier_;
  std::unique_ptr<weightsync::InProcessPublisher> publisher_;
  std::unique_ptr<weightsync::Receiver> receiver_;
  std::unique_ptr<learner::LearnerWorker> learner_;
  std::unique_ptr<actor::RolloutWorker> actor_;
  std::unique_ptr<reference::ReferenceWorker> reference_;
  std::unique_ptr<environment::Environment> environment_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<RoleSet>> BindLocalRoles(const v1::JobConfig& job,
                                                        const text::Tokenizer* tokenizer,
                                                        ledger::Ledger* ledger) {
  return LocalRoleSet::Bind(job, tokenizer, ledger);
}

absl::Status RunEmbeddedJob(const v1::JobConfig& job, const std::string& out_dir,
                            std::ostream& progress, LedgerObserver observe, env::Env* env) {
  if (absl::Status s = model::CheckDeviceVisible(job); !s.ok()) return s;
  if (absl::Status s = config::ValidateEmbeddedJob(job); !s.ok()) return s;
  return RunJob(job, out_dir, nullptr, BindLocalRoles, progress, std::move(observe), nullptr,
                env);
}

absl::Status ResumeEmbeddedJob(const std::string& run_dir, std::ostream& progress,
                               LedgerObserver observe, env::Env* env) {
  absl::StatusOr<v1::JobConfig> job = config::LoadJobFile(env::RunDir(run_dir).JobYaml());
  if (!job.ok()) {
    return absl::Status(job.status().code(),
                        absl::StrCat("resume: ", job.status().message()));
  }
  if (absl::Status s = model::CheckDeviceVisible(*job); !s.ok()) return s;
  if (absl::Status s = config::ValidateEmbeddedJob(*job); !s.ok()) return s;
  absl::StatusOr<Checkpoint> checkpoint = ReadLatestCheckpoint(env, run_dir);
  if (!checkpoint.ok()) return checkpoint.status();
  return RunJob(*job, run_dir, &*checkpoint, BindLocalRoles, progress, std::move(observe),
                nullptr, env);
}

}  // namespace trellis::run
