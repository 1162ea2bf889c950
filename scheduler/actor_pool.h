#ifndef TRELLIS_SCHEDULER_ACTOR_POOL_H_
#define TRELLIS_SCHEDULER_ACTOR_POOL_H_

// Several actors behind one RolloutWorker, so that the loop is the same
// with one actor or many. Generate splits the prompts into shards, one per
// live actor (every copy of a prompt id with its first), and runs them at
// once. Routing is sticky: a prompt id that a live actor answered in the
// previous call goes to that actor again, so a multi-turn episode (its
// prompt id is the episode's key) continues from that actor's turn cache
// (actor/internal/turn_cache.h) instead of being prefilled anew; only the
// previous call's assignments are kept. The other ids fill the shards in
// request order to about equal sizes. Which actor answers a row does not
// change its samples (rows draw from keyed streams). A shard whose actor
// fails (unavailable, deadline, cancelled) or is declared dead is given
// whole to a live actor, so every prompt is answered exactly once and the
// batch stays full. A partial rollout's request (finish_prompts > 0) gives
// each shard its share of the prompts to finish, rounded up. SyncWeights
// brings every live actor to the version. Under sampling.concurrency AUTO
// each actor has a ConcurrencyController (scheduler/concurrency_controller.h):
// its shard's request carries the decode batch bound the controller chose,
// and what the shard measured feeds the controller for the next call.
//
// Members change only between calls (a Generate is one step's rollout): at
// the start of each call the pool asks its change source who joins and who
// leaves. A joining actor first loads the version the pool last synced to
// and then gets work; a drained one gets no more work and is reported left
// (it finished whatever it was given before). The last serving member
// stays even when drained: its leaving would stop the job.

#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "actor/rollout_worker.h"
#include "scheduler/concurrency_controller.h"

namespace trellis::scheduler {

class ActorPool final : public actor::RolloutWorker {
 public:
  struct Member {
    std::string id;
    std::unique_ptr<actor::RolloutWorker> worker;
  };
  // `alive(id)` tells whether the scheduler still counts the worker alive
  // (heartbeats); `mark_dead(id)` reports a worker the pool gave up on.
  // Notes on failures and re-dispatches go to `log` (may be null).
  // `concurrency` (sampling.concurrency AUTO; must pass
  // ValidateConcurrencyOptions) sizes each actor's decode batch; without
  // it each shard keeps the request's decode_token_budget.
  ActorPool(std::vector<Member> members, std::function<bool(const std::string&)> alive,
            std::function<void(const std::string&)> mark_dead, std::ostream* log,
            std::optional<ConcurrencyOptions> concurrency = std::nullopt);

  // Who joins and who leaves at a call boundary.
  struct Changes {
    std::vector<Member> joining;
    // Ids of serving members asked to drain.
    std::vector<std::string> leaving;
  };
  // Asked at the start of every call with the ids of the serving members.
  using ChangeSource = std::function<Changes(const std::vector<std::string>& serving)>;
  // `left(id)`: a drained member no call of the pool reaches any more.
  // REQUIRES: no call of the pool is running.
  void SetChangeSource(ChangeSource source, std::function<void(const std::string&)> left);

  // Every shard keeps request.seed: rows draw from streams keyed by the
  // sample (actor/internal/row_key.h), so the pool samples what one actor
  // does with the whole request, whatever the number of actors. The
  // response's `actors` counts the members that answered a shard.
  absl::StatusOr<v1::GenerateResponse> Generate(const v1::GenerateRequest& request) override {
    return GenerateStreaming(request, nullptr);
  }
  // Each shard is a part, handed over (from its actor's thread) as soon as
  // it is answered: verification of one actor's samples starts while the
  // others still generate. A failed shard hands nothing over.
  absl::StatusOr<v1::GenerateResponse> GenerateStreaming(const v1::GenerateRequest& request,
                                                         const PartSink& on_part) override;
  absl::StatusOr<v1::WeightSyncStats> SyncWeights(int64_t version) override;
  // The oldest version among live actors.
  int64_t policy_version() const override;

  // Prompts given to another actor after their actor failed, so far.
  int64_t redispatched_prompts() const;

 private:
  // A member is never removed (indices stay valid): it stops serving.
  enum class State { kServing, kFailed, kLeft };

  std::vector<int> LiveMembers() const;
  void GiveUp(int member, const absl::Status& why);
  // Takes in the change source's joiners (synced to the pool's version
  // first when `sync_joiners`) and lets drained members go.
  void ApplyChanges(bool sync_joiners);
  void Leave(const std::vector<std::string>& leaving);
  // AUTO: the bound `member`'s controller chose for a shard of `rows` rows;
  // otherwise `asked`, the caller's (0: the actor's own).
  int32_t DecodeBudget(int member, int64_t rows, int32_t asked);
  void ObserveDecode(int member, int64_t rows, const v1::GenerateResponse& response);
  ConcurrencyController& Controller(int member) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  actor::RolloutWorker* worker(int member) const;
  std::string id(int member) const;

  const std::function<bool(const std::string&)> alive_;
  const std::function<void(const std::string&)> mark_dead_;
  std::ostream* log_;
  const std::optional<ConcurrencyOptions> concurrency_;
  ChangeSource changes_;
  std::function<void(const std::string&)> left_;
  mutable absl::Mutex mu_;
  // Grows only; each worker lives as long as the pool.
  std::vector<Member> members_ ABSL_GUARDED_BY(mu_);
  std::vector<State> state_ ABSL_GUARDED_BY(mu_);
  // The draining last member kept serving (said once, not at every call).
  std::string kept_last_ ABSL_GUARDED_BY(mu_);
  // The version of the last SyncWeights: what a joiner loads.
  std::optional<int64_t> version_ ABSL_GUARDED_BY(mu_);
  int64_t redispatched_ ABSL_GUARDED_BY(mu_) = 0;
  // The member that answered each prompt id of the previous call.
  absl::flat_hash_map<uint64_t, int> previous_member_ ABSL_GUARDED_BY(mu_);
  // AUTO: each member's controller by id, made on its first shard.
  absl::flat_hash_map<std::string, ConcurrencyController> controllers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trellis::scheduler

#endif  // TRELLIS_SCHEDULER_ACTOR_POOL_H_
