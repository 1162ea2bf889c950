#include "roles/local_roles.h"

#include <utility>
#include <vector>

#include "actor/local_actor.h"
#include "config/job_config.h"
#include "config/threads.h"
#include "environment/builtin.h"
#include "learner/local_learner.h"
#include "learner/torch_guard.h"
#include "loop/recipe.h"
#include "model/shared_base.h"
#include "model/thread_probe.h"
#include "model/token_ids.h"
#include "model/torch_status.h"

namespace trellis::roles {

model::ThreadCounts SetThreads(const v1::JobConfig& job) {
  const int given = config::ResolveThreads(job.runtime().num_threads());
  model::SetThreads(given);
  const model::ThreadProbe probe = model::ProbeIntraOpThreads(job.model(), given);
  model::ThreadCounts counts = model::CurrentThreads();
  counts.given = given;
  counts.probe_seconds = probe.seconds;
  return counts;
}

absl::StatusOr<std::unique_ptr<learner::LearnerWorker>> MakeLocalLearner(
    const v1::JobConfig& job, const text::Tokenizer& tokenizer, weightsync::Publisher* publisher,
    ledger::Ledger* ledger, const std::string& worker_id, const learner::GroupMember& group,
    model::Binding binding, std::shared_ptr<model::SharedBase> shared_base) {
  learner::LocalLearnerOptions options;
  options.worker_id = worker_id;
  options.group = group;
  options.vocab_size = model::VocabSize(job.model(), tokenizer.vocab_size());
  options.pad_id = tokenizer.pad_id();
  options.seed = job.runtime().seed();
  options.device = model::RoleDevice(job, v1::LEARNER, binding);
  options.shared_base = std::move(shared_base);
  absl::StatusOr<std::unique_ptr<learner::LearnerWorker>> made = model::TorchEdge(worker_id).Call(
      "build", [&] { return learner::NewLocalLearner(job, options, publisher, ledger); });
  if (!made.ok()) return made.status();
  return learner::GuardTorchErrors(*std::move(made), worker_id);
}

absl::StatusOr<std::unique_ptr<actor::RolloutWorker>> MakeLocalActor(
    const v1::JobConfig& job, const text::Tokenizer* tokenizer, weightsync::Receiver* receiver,
    ledger::Ledger* ledger, const std::string& worker_id, model::Binding binding,
    std::shared_ptr<const model::SharedBase> shared_base) {
  actor::LocalActorOptions options;
  options.worker_id = worker_id;
  options.lora = job.memory().lora();
  options.seed = job.runtime().seed();
  options.stream_groups = !job.environment().name().empty();
  options.decode_token_budget = job.sampling().decode_token_budget();
  options.device = model::RoleDevice(job, v1::ACTOR, binding);
  options.colocated = job.deployment().placement() == v1::DeploymentConfig::COLOCATED;
  options.shared_base = std::move(shared_base);
  options.record_routing = job.grpo().routing_replay();
  options.tensor_parallel = job.deployment().actor().tensor_parallel();
  options.rank_devices = model::RankDevices(job, v1::ACTOR, binding);
  return actor::NewLocalActor(job.model(), tokenizer, receiver, ledger, options);
}

absl::StatusOr<std::unique_ptr<reference::ReferenceWorker>> MakeLocalReference(
    const v1::JobConfig& job, const text::Tokenizer* tokenizer, ledger::Ledger* ledger,
    model::Binding binding, std::shared_ptr<const model::SharedBase> shared_base) {
  if (!loop::NeedsReference(job)) return nullptr;
  return reference::NewLocalReference(
      job, tokenizer, ledger, model::RoleDevice(job, v1::REFERENCE, binding),
      std::move(shared_base), model::RankDevices(job, v1::REFERENCE, binding));
}

std::shared_ptr<model::SharedBase> ProcessSharedBase(const v1::JobConfig& job) {
  if (job.memory().lora().rank() == 0) return nullptr;
  return std::make_shared<model::SharedBase>();
}

namespace {

// The kinds main added to every registry of type `Registry`.
template <typename Registry>
std::vector<std::function<absl::Status(Registry&)>>& ExtraKinds() {
  static auto* kinds = new std::vector<std::function<absl::Status(Registry&)>>();
  return *kinds;
}

// A registry with the built-ins and the added kinds, asked for `config`.
template <typename Registry, typename Config>
auto Make(absl::Status (*register_builtins)(Registry&), const Config& config)
    -> decltype(std::declval<Registry>().Create(config)) {
  Registry registry;
  if (absl::Status s = register_builtins(registry); !s.ok()) return s;
  for (const auto& kinds : ExtraKinds<Registry>()) {
    if (absl::Status s = kinds(registry); !s.ok()) return s;
  }
  return registry.Create(config);
}

}  // namespace

void AddVerifierKinds(VerifierKinds kinds) { verifier::AddProcessVerifierKinds(std::move(kinds)); }

absl::StatusOr<std::unique_ptr<verifier::Verifier>> MakeVerifier(
    const v1::VerifierConfig& config) {
  absl::StatusOr<verifier::VerifierRegistry> registry = verifier::ProcessVerifiers();
  if (!registry.ok()) return registry.status();
  return registry->Create(config);
}

void AddEnvironmentKinds(EnvironmentKinds kinds) {
  ExtraKinds<environment::EnvironmentRegistry>().push_back(std::move(kinds));
}

absl::StatusOr<std::unique_ptr<environment::Environment>> MakeEnvironment(
    const v1::EnvironmentConfig& config) {
  if (config.name().empty()) return nullptr;
  return Make(&environment::RegisterBuiltinEnvironments, config);
}

}  // namespace trellis::roles
