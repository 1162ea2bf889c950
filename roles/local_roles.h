#ifndef TRELLIS_ROLES_LOCAL_ROLES_H_
#define TRELLIS_ROLES_LOCAL_ROLES_H_

// Builds each role's in-process engine from a job: the embedded run binds
// them directly, and `trellis serve ROLE` serves one of them.

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "actor/rollout_worker.h"
#include "environment/environment.h"
#include "learner/group_member.h"
#include "learner/learner_worker.h"
#include "ledger/ledger.h"
#include "model/device.h"
#include "model/threads.h"
#include "reference/reference_worker.h"
#include "text/tokenizer.h"
#include "trellis/v1/job.pb.h"
#include "verifier/verifier.h"
#include "weightsync/transport.h"

namespace trellis::model {
class SharedBase;  // model/shared_base.h
}  // namespace trellis::model

namespace trellis::roles {

// Sizes every thread pool of the process (LibTorch's intra-op and inter-op
// pools, OpenBLAS's threads: model/threads.h) from runtime.num_threads (0:
// one per physical core), then keeps as many intra-op threads as pay for
// the job's model on this machine (model/thread_probe.h); returns the sizes
// and the probe's timings. REQUIRES: the job prepared (its model's shape
// known).
model::ThreadCounts SetThreads(const v1::JobConfig& job);

// Each role computes on the device model::RoleDevice gives it for
// `binding` (embedded in the run's process, or served by a worker of its
// own) and the devices this process sees.
//
// `group`: the learner's rank in its data-parallel group (none by default);
// `publisher` may be null on ranks other than 0, which publish nothing.
//
// `shared_base`: LoRA on one base (model/shared_base.h, from
// ProcessSharedBase): the learner holds its frozen base there and an actor
// or reference made after it in the same process reads it instead of a
// copy. Null: each role keeps its own.
[[nodiscard]] absl::StatusOr<std::unique_ptr<learner::LearnerWorker>> MakeLocalLearner(
    const v1::JobConfig& job, const text::Tokenizer& tokenizer, weightsync::Publisher* publisher,
    ledger::Ledger* ledger, const std::string& worker_id, const learner::GroupMember& group = {},
    model::Binding binding = model::Binding::kEmbedded,
    std::shared_ptr<model::SharedBase> shared_base = nullptr);

[[nodiscard]] absl::StatusOr<std::unique_ptr<actor::RolloutWorker>> MakeLocalActor(
    const v1::JobConfig& job, const text::Tokenizer* tokenizer, weightsync::Receiver* receiver,
    ledger::Ledger* ledger, const std::string& worker_id,
    model::Binding binding = model::Binding::kEmbedded,
    std::shared_ptr<const model::SharedBase> shared_base = nullptr);

// Null when the job does not need the reference (loop::NeedsReference).
[[nodiscard]] absl::StatusOr<std::unique_ptr<reference::ReferenceWorker>> MakeLocalReference(
    const v1::JobConfig& job, const text::Tokenizer* tokenizer, ledger::Ledger* ledger,
    model::Binding binding = model::Binding::kEmbedded,
    std::shared_ptr<const model::SharedBase> shared_base = nullptr);

// The base the roles of one process share under LoRA (job.memory.lora),
// empty until the learner holds it; null for a job without LoRA.
std::shared_ptr<model::SharedBase> ProcessSharedBase(const v1::JobConfig& job);

// Every later MakeVerifier, and every job's preparation
// (loop::PrepareJob), offers `kinds` too (verifier::AddProcessVerifierKinds:
// the "remote" kind of verifier/verifier_service.h, which needs gRPC).
// Called from main (and tests) before any job starts; not thread-safe.
using VerifierKinds = verifier::VerifierKinds;
void AddVerifierKinds(VerifierKinds kinds);

// The verifier `config` names: a built-in, or a kind added by
// AddVerifierKinds (verifier::ProcessVerifiers).
[[nodiscard]] absl::StatusOr<std::unique_ptr<verifier::Verifier>> MakeVerifier(
    const v1::VerifierConfig& config);

// The same for environments (the "remote" kind of
// environment_service/environment_service.h).
using EnvironmentKinds = std::function<absl::Status(environment::EnvironmentRegistry&)>;
void AddEnvironmentKinds(EnvironmentKinds kinds);

// The environment `config` names, null when it names none (a built-in, environment/builtin.h, or a
// kind added by AddEnvironmentKinds), wrapped in the pool (deadlines,
// breaker, counts: environment/pool.h). NotFound naming the registered
// environments when config.name is unknown.
[[nodiscard]] absl::StatusOr<std::unique_ptr<environment::Environment>> MakeEnvironment(
    const v1::EnvironmentConfig& config);

}  // namespace trellis::roles

#endif  // TRELLIS_ROLES_LOCAL_ROLES_H_
