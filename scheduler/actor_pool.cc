#include "scheduler/actor_pool.h"

#include <algorithm>
#include <future>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace trellis::scheduler {
namespace {

// Failures that mean "this worker is gone", not "this request is bad".
bool WorkerFailure(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) || absl::IsCancelled(s) ||
         absl::IsAborted(s);
}

struct Shard {
  int member = -1;           // The member asked for it; -1: none yet.
  std::vector<int> prompts;  // Indices into the request's prompts, ascending.
  v1::GenerateResponse response;
  bool done = false;
};

// One shard per live member (shard k for live[k]). A prompt id that a live
// member answered in the previous call goes to that member again (its turn
// cache holds the episode). The other ids fill the shards in request order
// up to about equal sizes, contiguously as far as the sticky ones allow.
// Every copy of a prompt id goes with its first copy, in order: a row's
// sampling key counts the copies of its id before it in the request
// (actor/internal/row_key.h), and this keeps that count in the shard.
std::vector<Shard> SplitPrompts(const v1::GenerateRequest& request, const std::vector<int>& live,
                                const absl::flat_hash_map<uint64_t, int>& previous) {
  const int prompts = request.prompts_size();
  const int count = static_cast<int>(live.size());
  std::vector<Shard> shards(count);
  absl::flat_hash_map<int, int> shard_of_member;
  for (int k = 0; k < count; ++k) {
    shards[k].member = live[k];
    shard_of_member[live[k]] = k;
  }
  auto sticky_shard = [&](uint64_t id) {
    auto before = previous.find(id);
    if (before == previous.end()) return -1;
    auto shard = shard_of_member.find(before->second);
    return shard == shard_of_member.end() ? -1 : shard->second;
  };
  std::vector<int> load(count, 0);
  for (const v1::Prompt& p : request.prompts()) {
    const int k = sticky_shard(p.id());
    if (k >= 0) ++load[k];
  }
  auto target = [&](int k) {
    return static_cast<int>(static_cast<int64_t>(prompts) * (k + 1) / count -
                            static_cast<int64_t>(prompts) * k / count);
  };
  absl::flat_hash_map<uint64_t, int> shard_of_id;
  int next = 0;  // The shard new ids fill.
  for (int i = 0; i < prompts; ++i) {
    const uint64_t id = request.prompts(i).id();
    const int sticky = sticky_shard(id);
    auto [it, first] = shard_of_id.emplace(id, sticky);
    if (first && sticky < 0) {
      while (next + 1 < count && load[next] >= target(next)) ++next;
      it->second = next;
    }
    shards[it->second].prompts.push_back(i);
    if (sticky < 0) ++load[it->second];
  }
  // A shard left with no prompt has nothing to ask.
  for (Shard& shard : shards) shard.done = shard.prompts.empty();
  return shards;
}

}  // namespace

ActorPool::ActorPool(std::vector<Member> members, std::function<bool(const std::string&)> alive,
                     std::function<void(const std::string&)> mark_dead, std::ostream* log,
                     std::optional<ConcurrencyOptions> concurrency)
    : alive_(std::move(alive)),
      mark_dead_(std::move(mark_dead)),
      log_(log),
      concurrency_(std::move(concurrency)),
      members_(std::move(members)),
      state_(members_.size(), State::kServing) {}

void ActorPool::SetChangeSource(ChangeSource source,
                                std::function<void(const std::string&)> left) {
  changes_ = std::move(source);
  left_ = std::move(left);
}

actor::RolloutWorker* ActorPool::worker(int member) const {
  absl::MutexLock lock(&mu_);
  return members_[member].worker.get();
}

std::string ActorPool::id(int member) const {
  absl::MutexLock lock(&mu_);
  return members_[member].id;
}

std::vector<int> ActorPool::LiveMembers() const {
  std::vector<int> live;
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < static_cast<int>(members_.size()); ++i) {
    if (state_[i] == State::kServing && (!alive_ || alive_(members_[i].id))) live.push_back(i);
  }
  return live;
}

void ActorPool::GiveUp(int member, const absl::Status& why) {
  {
    absl::MutexLock lock(&mu_);
    if (state_[member] != State::kServing) return;
    state_[member] = State::kFailed;
  }
  const std::string failed = id(member);
  if (mark_dead_) mark_dead_(failed);
  if (log_ != nullptr) {
    *log_ << "actor pool: " << failed << " failed (" << why
          << "); its work goes to the live actors" << std::endl;
  }
}

void ActorPool::ApplyChanges(bool sync_joiners) {
  if (!changes_) return;
  std::vector<std::string> serving;
  std::optional<int64_t> version;
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < members_.size(); ++i) {
      if (state_[i] == State::kServing) serving.push_back(members_[i].id);
    }
    version = version_;
  }
  Changes changes = changes_(serving);
  for (Member& joiner : changes.joining) {
    // A joiner holds the pool's weights before it is given work; at a
    // SyncWeights boundary the pool-wide sync that follows loads them.
    if (sync_joiners && version.has_value()) {
      if (absl::StatusOr<v1::WeightSyncStats> synced = joiner.worker->SyncWeights(*version);
          !synced.ok()) {
        if (mark_dead_) mark_dead_(joiner.id);
        if (log_ != nullptr) {
          *log_ << "actor pool: " << joiner.id << " could not load version " << *version << " ("
                << synced.status() << "); it does not join" << std::endl;
        }
        continue;
      }
    }
    if (log_ != nullptr) *log_ << "actor pool: " << joiner.id << " joins" << std::endl;
    absl::MutexLock lock(&mu_);
    members_.push_back(std::move(joiner));
    state_.push_back(State::kServing);
  }
  Leave(changes.leaving);
}

void ActorPool::Leave(const std::vector<std::string>& leaving) {
  for (const std::string& drained : leaving) {
    bool last = false, said = false;
    {
      absl::MutexLock lock(&mu_);
      const int serving =
          static_cast<int>(std::count(state_.begin(), state_.end(), State::kServing));
      for (size_t i = 0; i < members_.size(); ++i) {
        if (members_[i].id != drained || state_[i] != State::kServing) continue;
        last = serving == 1;
        if (!last) state_[i] = State::kLeft;
      }
      said = last && kept_last_ == drained;
      if (last) kept_last_ = drained;
    }
    if (log_ != nullptr && !said) {
      *log_ << "actor pool: " << drained
            << (last ? " is draining but is the last actor; it stays until another joins"
                     : " drained; it leaves the pool")
            << std::endl;
    }
    if (!last && left_) left_(drained);
  }
}

ConcurrencyController& ActorPool::Controller(int member) {
  return controllers_.try_emplace(members_[member].id, *concurrency_).first->second;
}

int32_t ActorPool::DecodeBudget(int member, int64_t rows, int32_t asked) {
  if (!concurrency_.has_value()) return asked;
  absl::MutexLock lock(&mu_);
  return static_cast<int32_t>(Controller(member).Budget(rows));
}

void ActorPool::ObserveDecode(int member, int64_t rows, const v1::GenerateResponse& response) {
  if (!concurrency_.has_value()) return;
  absl::MutexLock lock(&mu_);
  Controller(member).Observe({response.decode_token_budget(), rows, response.generated_tokens(),
                              response.decode_seconds()});
}

absl::StatusOr<v1::GenerateResponse> ActorPool::GenerateStreaming(
    const v1::GenerateRequest& request, const PartSink& on_part) {
  const int prompts = request.prompts_size();
  ApplyChanges(/*sync_joiners=*/true);
  std::vector<int> live = LiveMembers();
  if (live.empty()) return absl::UnavailableError("actor pool: no live actor");
  std::vector<Shard> shards;
  {
    absl::MutexLock lock(&mu_);
    shards = SplitPrompts(request, live, previous_member_);
  }
  const int64_t responses = std::max(1, request.responses_per_prompt());
  auto shard_rows = [responses](const Shard& shard) {
    return responses * static_cast<int64_t>(shard.prompts.size());
  };
  auto shard_request = [&](const Shard& shard) {
    v1::GenerateRequest r;
    r.set_responses_per_prompt(request.responses_per_prompt());
    *r.mutable_sampling() = request.sampling();
    r.set_seed(request.seed());
    for (int i : shard.prompts) *r.add_prompts() = request.prompts(i);
    if (request.finish_prompts() > 0) {
      // Partial rollout: each shard stops at its share of the prompts to
      // finish, rounded up (the pool finishes at least as many).
      const int64_t share = static_cast<int64_t>(request.finish_prompts()) *
                            static_cast<int64_t>(shard.prompts.size());
      r.set_finish_prompts(static_cast<int32_t>((share + prompts - 1) / prompts));
    }
    r.set_decode_token_budget(
        DecodeBudget(shard.member, shard_rows(shard), request.decode_token_budget()));
    return r;
  };
  // Rounds: every pending shard goes to its member while that one is live,
  // else to a live one; the failed ones are pending again in the next round.
  while (true) {
    std::vector<int> pending;
    for (int k = 0; k < static_cast<int>(shards.size()); ++k) {
      if (!shards[k].done) pending.push_back(k);
    }
    if (pending.empty()) break;
    live = LiveMembers();
    if (live.empty()) {
      return absl::UnavailableError(absl::StrCat("actor pool: every actor failed with ",
                                                 pending.size(),
                                                 " shard(s) of the batch unanswered"));
    }
    std::vector<std::future<absl::StatusOr<v1::GenerateResponse>>> calls;
    for (size_t j = 0; j < pending.size(); ++j) {
      Shard& shard = shards[pending[j]];
      if (std::find(live.begin(), live.end(), shard.member) == live.end()) {
        shard.member = live[j % live.size()];
      }
      actor::RolloutWorker* const w = worker(shard.member);
      const v1::GenerateRequest r = shard_request(shard);
      calls.push_back(std::async(std::launch::async, [w, r, &on_part]() {
        absl::StatusOr<v1::GenerateResponse> response = w->Generate(r);
        if (response.ok() && on_part) on_part(*response);
        return response;
      }));
    }
    for (size_t j = 0; j < pending.size(); ++j) {
      absl::StatusOr<v1::GenerateResponse> result = calls[j].get();
      Shard& shard = shards[pending[j]];
      if (result.ok()) {
        ObserveDecode(shard.member, shard_rows(shard), *result);
        shard.response = *std::move(result);
        shard.done = true;
      } else if (WorkerFailure(result.status())) {
        GiveUp(shard.member, result.status());
        absl::MutexLock lock(&mu_);
        redispatched_ += static_cast<int64_t>(shard.prompts.size());
      } else {
        return result.status();
      }
    }
  }
  {
    absl::MutexLock lock(&mu_);
    previous_member_.clear();
    for (const Shard& shard : shards) {
      for (int i : shard.prompts) previous_member_[request.prompts(i).id()] = shard.member;
    }
  }
  // The samples back in request order: each prompt's group, in turn.
  std::vector<std::vector<v1::Sample>> groups(prompts);
  v1::GenerateResponse all;
  std::vector<int> answered;
  bool bounded = true;  // every actor that decoded had a bound
  int64_t budget = 0;
  for (Shard& shard : shards) {
    if (!shard.prompts.empty() &&
        std::find(answered.begin(), answered.end(), shard.member) == answered.end()) {
      answered.push_back(shard.member);
    }
    auto& samples = *shard.response.mutable_samples();
    const size_t group =
        std::max<size_t>(1, samples.size() / std::max<size_t>(1, shard.prompts.size()));
    for (int j = 0; j < samples.size(); ++j) {
      groups[shard.prompts[std::min(j / group, shard.prompts.size() - 1)]].push_back(
          std::move(samples[j]));
    }
    all.set_kv_cache_bytes(std::max(all.kv_cache_bytes(), shard.response.kv_cache_bytes()));
    all.set_generated_tokens(all.generated_tokens() + shard.response.generated_tokens());
    all.set_prefill_tokens(all.prefill_tokens() + shard.response.prefill_tokens());
    all.set_forward_flops(all.forward_flops() + shard.response.forward_flops());
    if (shard.prompts.empty()) continue;  // asked nothing, decoded nothing
    all.set_decode_seconds(std::max(all.decode_seconds(), shard.response.decode_seconds()));
    bounded = bounded && shard.response.decode_token_budget() > 0;
    budget += shard.response.decode_token_budget();
  }
  all.set_decode_token_budget(bounded ? static_cast<int32_t>(budget) : 0);
  for (auto& group : groups) {
    for (v1::Sample& s : group) *all.add_samples() = std::move(s);
  }
  all.set_actors(static_cast<int32_t>(answered.size()));
  return all;
}

absl::StatusOr<v1::WeightSyncStats> ActorPool::SyncWeights(int64_t version) {
  ApplyChanges(/*sync_joiners=*/false);
  const std::vector<int> live = LiveMembers();
  if (live.empty()) return absl::UnavailableError("actor pool: no live actor");
  std::vector<std::future<absl::StatusOr<v1::WeightSyncStats>>> calls;
  for (int m : live) {
    calls.push_back(std::async(std::launch::async, [w = worker(m), version]() {
      return w->SyncWeights(version);
    }));
  }
  // Bytes add up over the actors; times are the slowest actor's.
  v1::WeightSyncStats total;
  int synced = 0;
  absl::Status first_error;
  for (size_t j = 0; j < live.size(); ++j) {
    absl::StatusOr<v1::WeightSyncStats> s = calls[j].get();
    if (!s.ok()) {
      if (!WorkerFailure(s.status())) return s.status();
      GiveUp(live[j], s.status());
      if (first_error.ok()) first_error = s.status();
      continue;
    }
    ++synced;
    total.set_version(s->version());
    total.set_bytes(total.bytes() + s->bytes());
    total.set_tensors(s->tensors());
    total.set_buckets(s->buckets());
    total.set_gather_seconds(std::max(total.gather_seconds(), s->gather_seconds()));
    total.set_transfer_seconds(std::max(total.transfer_seconds(), s->transfer_seconds()));
    total.set_load_seconds(std::max(total.load_seconds(), s->load_seconds()));
  }
  if (synced == 0) return first_error;
  absl::MutexLock lock(&mu_);
  version_ = version;
  return total;
}

int64_t ActorPool::policy_version() const {
  int64_t version = -1;
  bool first = true;
  for (int m : LiveMembers()) {
    const int64_t v = worker(m)->policy_version();
    version = first ? v : std::min(version, v);
    first = false;
  }
  return version;
}

int64_t ActorPool::redispatched_prompts() const {
  absl::MutexLock lock(&mu_);
  return redispatched_;
}

}  // namespace trellis::scheduler
