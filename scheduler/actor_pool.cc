#include "scheduler/actor_pool.h"

#include <algorithm>
#include <future>

#include "absl/strings/str_cat.h"

namespace trellis::scheduler {
namespace {

// Failures that mean "this worker is gone", not "this request is bad".
bool WorkerFailure(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) || absl::IsCancelled(s) ||
         absl::IsAborted(s);
}

struct Shard {
  int begin = 0;  // Prompt range [begin, end).
  int end = 0;
  uint64_t seed = 0;
  v1::GenerateResponse response;
  bool done = false;
};

}  // namespace

ActorPool::ActorPool(std::vector<Member> members, std::function<bool(const std::string&)> alive,
                     std::function<void(const std::string&)> mark_dead, std::ostream* log)
    : members_(std::move(members)),
      alive_(std::move(alive)),
      mark_dead_(std::move(mark_dead)),
      log_(log),
      failed_(members_.size(), false) {}

std::vector<int> ActorPool::LiveMembers() const {
  std::vector<int> live;
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < static_cast<int>(members_.size()); ++i) {
    if (!failed_[i] && (!alive_ || alive_(members_[i].id))) live.push_back(i);
  }
  return live;
}

void ActorPool::GiveUp(int member, const absl::Status& why) {
  {
    absl::MutexLock lock(&mu_);
    if (failed_[member]) return;
    failed_[member] = true;
  }
  if (mark_dead_) mark_dead_(members_[member].id);
  if (log_ != nullptr) {
    *log_ << "actor pool: " << members_[member].id << " failed (" << why
          << "); its work goes to the live actors" << std::endl;
  }
}

absl::StatusOr<v1::GenerateResponse> ActorPool::GenerateStreaming(
    const v1::GenerateRequest& request, const PartSink& on_part) {
  const int prompts = request.prompts_size();
  std::vector<int> live = LiveMembers();
  if (live.empty()) return absl::UnavailableError("actor pool: no live actor");
  const int n = std::max(1, std::min<int>(live.size(), prompts));
  std::vector<Shard> shards(n);
  for (int k = 0; k < n; ++k) {
    shards[k].begin = static_cast<int>(static_cast<int64_t>(prompts) * k / n);
    shards[k].end = static_cast<int>(static_cast<int64_t>(prompts) * (k + 1) / n);
    shards[k].seed = request.seed() + static_cast<uint64_t>(k) * 0x9E3779B97F4A7C15ULL;
  }
  auto shard_request = [&](const Shard& shard) {
    v1::GenerateRequest r;
    r.set_responses_per_prompt(request.responses_per_prompt());
    *r.mutable_sampling() = request.sampling();
    r.set_seed(shard.seed);
    for (int i = shard.begin; i < shard.end; ++i) *r.add_prompts() = request.prompts(i);
    return r;
  };
  // Rounds: every pending shard goes to a live actor; the failed ones are
  // pending again in the next round.
  while (true) {
    std::vector<int> pending;
    for (int k = 0; k < n; ++k) {
      if (!shards[k].done) pending.push_back(k);
    }
    if (pending.empty()) break;
    live = LiveMembers();
    if (live.empty()) {
      return absl::UnavailableError(
          absl::StrCat("actor pool: every actor failed with ", pending.size(),
                       " shard(s) of the batch unanswered"));
    }
    std::vector<std::future<absl::StatusOr<v1::GenerateResponse>>> calls;
    std::vector<int> owner;
    for (size_t j = 0; j < pending.size(); ++j) {
      const int m = live[j % live.size()];
      owner.push_back(m);
      const v1::GenerateRequest r = shard_request(shards[pending[j]]);
      calls.push_back(std::async(std::launch::async, [this, m, r, &on_part]() {
        absl::StatusOr<v1::GenerateResponse> response = members_[m].worker->Generate(r);
        if (response.ok() && on_part) on_part(*response);
        return response;
      }));
    }
    for (size_t j = 0; j < pending.size(); ++j) {
      absl::StatusOr<v1::GenerateResponse> result = calls[j].get();
      Shard& shard = shards[pending[j]];
      if (result.ok()) {
        shard.response = *std::move(result);
        shard.done = true;
      } else if (WorkerFailure(result.status())) {
        GiveUp(owner[j], result.status());
        absl::MutexLock lock(&mu_);
        redispatched_ += shard.end - shard.begin;
      } else {
        return result.status();
      }
    }
  }
  v1::GenerateResponse all;
  for (Shard& shard : shards) {
    for (v1::Sample& s : *shard.response.mutable_samples()) *all.add_samples() = std::move(s);
    all.set_kv_cache_bytes(std::max(all.kv_cache_bytes(), shard.response.kv_cache_bytes()));
    all.set_generated_tokens(all.generated_tokens() + shard.response.generated_tokens());
  }
  return all;
}

absl::StatusOr<v1::WeightSyncStats> ActorPool::SyncWeights(int64_t version) {
  const std::vector<int> live = LiveMembers();
  if (live.empty()) return absl::UnavailableError("actor pool: no live actor");
  std::vector<std::future<absl::StatusOr<v1::WeightSyncStats>>> calls;
  for (int m : live) {
    calls.push_back(std::async(std::launch::async,
                               [this, m, version]() { return members_[m].worker->SyncWeights(version); }));
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
  return total;
}

int64_t ActorPool::policy_version() const {
  int64_t version = -1;
  bool first = true;
  for (int m : LiveMembers()) {
    const int64_t v = members_[m].worker->policy_version();
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
