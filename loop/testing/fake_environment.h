#ifndef TRELLIS_LOOP_TESTING_FAKE_ENVIRONMENT_H_
#define TRELLIS_LOOP_TESTING_FAKE_ENVIRONMENT_H_

// Fakes of a multi-turn rollout's two sides for the loop's tests: an actor
// whose turns are a function of (request seed, row id, sequence) only, so
// that batching cannot change them, and an environment that answers each
// action with a numbered observation, counts its calls and fails or stalls
// when told.

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "actor/rollout_worker.h"
#include "environment/environment.h"
#include "text/tokenizer.h"

namespace trellis::loop::testing {

// Each row's turn: "g" and a digit drawn from (seed, row id), then the
// request's first stop sequence, or the EOS once the row's sequence has
// `eos_at_length` tokens or more; cut to max_new_tokens (truncated). The
// k-th token's log-prob is -0.1 * (k + 1).
class FakeTurnActor final : public actor::RolloutWorker {
 public:
  explicit FakeTurnActor(const text::Tokenizer* tokenizer) : tokenizer_(tokenizer) {}

  absl::StatusOr<v1::GenerateResponse> Generate(const v1::GenerateRequest& request) override {
    v1::GenerateResponse out;
    absl::MutexLock lock(&mu_);
    ++requests;
    for (const v1::Prompt& p : request.prompts()) {
      const uint64_t draw = (request.seed() ^ (p.id() * 0x9E3779B97F4A7C15ull)) % 10;
      std::vector<int32_t> ids = *tokenizer_->Encode(absl::StrCat("g", static_cast<int>(draw)));
      const bool eos = p.token_ids_size() >= eos_at_length || request.sampling().stop().empty();
      if (eos) {
        ids.push_back(tokenizer_->eos_id());
      } else {
        const auto& stop = request.sampling().stop(0).token_ids();
        ids.insert(ids.end(), stop.begin(), stop.end());
      }
      const size_t max_new = request.sampling().max_new_tokens();
      const bool cut = ids.size() > max_new;
      if (cut) ids.resize(max_new);
      v1::Sample* s = out.add_samples();
      s->set_prompt_id(p.id());
      *s->mutable_prompt_tokens() = p.token_ids();
      for (size_t k = 0; k < ids.size(); ++k) {
        s->add_response_tokens(ids[k]);
        s->add_logprobs(-0.1f * static_cast<float>(k + 1));
      }
      s->set_response_text(tokenizer_->Decode(ids));
      s->set_truncated(cut);
      s->set_stop_index(!cut && !eos ? 1 : 0);
      s->set_policy_version(version);
      out.set_generated_tokens(out.generated_tokens() + s->response_tokens_size());
    }
    return out;
  }
  absl::StatusOr<v1::WeightSyncStats> SyncWeights(int64_t v) override {
    version = v;
    return v1::WeightSyncStats();
  }
  int64_t policy_version() const override { return version; }

  int64_t eos_at_length = 1 << 30;
  int64_t version = 0;
  int requests = 0;

 private:
  const text::Tokenizer* tokenizer_;
  absl::Mutex mu_;
};

// Open answers "Q:" (or fails, see fail_open_prefix); Step `turn` answers "o<turn>;" with reward
// 0.5 and is done at turn done_at_turn. Steps of episodes whose id starts with `fail_prefix` fail
// Unavailable. Every Step advances `clock` by step_seconds. With `rendezvous` > 0 each Step waits
// (at most 30 s) until that many Steps are in flight at once.
class FakeEnvironment final : public environment::Environment {
 public:
  absl::StatusOr<v1::OpenEpisodeResponse> Open(const v1::OpenEpisodeRequest& request) override {
    absl::MutexLock lock(&mu_);
    if (!fail_open_prefix.empty() && request.episode_id().rfind(fail_open_prefix, 0) == 0) {
      return absl::DeadlineExceededError("fake environment: Open timed out");
    }
    opened.insert(request.episode_id());
    seeds.insert(request.seed());
    v1::OpenEpisodeResponse out;
    out.set_observation("Q:");
    return out;
  }

  absl::StatusOr<v1::EnvironmentStepResponse> Step(
      const v1::EnvironmentStepRequest& request) override {
    absl::MutexLock lock(&mu_);
    actions[request.episode_id()].push_back(request.action());
    ++steps_entered_;
    clock += absl::Seconds(step_seconds);
    ++in_flight_;
    most_in_flight = std::max(most_in_flight, in_flight_);
    if (rendezvous > 0) {
      const auto enough = [this] { return in_flight_ >= rendezvous || released_; };
      if (mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(30))) released_ = true;
    }
    --in_flight_;
    if (!fail_prefix.empty() && request.episode_id().rfind(fail_prefix, 0) == 0) {
      return absl::UnavailableError("fake environment: down");
    }
    v1::EnvironmentStepResponse out;
    out.set_observation(absl::StrCat("o", request.turn(), ";"));
    out.set_reward(0.5f);
    out.set_done(done_at_turn >= 0 && request.turn() >= done_at_turn);
    return out;
  }

  absl::Status Close(const v1::CloseEpisodeRequest& request) override {
    absl::MutexLock lock(&mu_);
    closed.insert(request.episode_id());
    return absl::OkStatus();
  }

  int MaxConcurrency() const override { return 64; }

  absl::Time Now() {
    absl::MutexLock lock(&mu_);
    return clock;
  }

  // Waits (at most `timeout`) until `count` Steps have been entered in
  // all; false when the time ran out first.
  bool AwaitSteps(int count, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    const auto enough = [this, count] { return steps_entered_ >= count; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }

  // -1: never done.
  int done_at_turn = -1;
  std::string fail_prefix;
  // Open of episodes whose id starts with it fails DeadlineExceeded.
  std::string fail_open_prefix;
  double step_seconds = 0;
  int rendezvous = 0;
  absl::Time clock = absl::UnixEpoch();
  std::set<std::string> opened, closed;
  std::set<uint64_t> seeds;
  std::map<std::string, std::vector<std::string>> actions;  // by episode
  int most_in_flight = 0;

 private:
  absl::Mutex mu_;
  int in_flight_ = 0;
  int steps_entered_ = 0;
  bool released_ = false;
};

// A streaming actor over `inner`'s answers that hands over one row per
// part, and after the first part of a request with more rows waits (at
// most 30 s) until `environment` has entered one more Step than before the
// request: that Step can only be the first row's episode's, started while
// this call still generates. Counts the requests where that happened.
class PartByPartActor final : public actor::RolloutWorker {
 public:
  PartByPartActor(actor::RolloutWorker* inner, FakeEnvironment* environment, int steps_before)
      : inner_(inner), environment_(environment), steps_(steps_before) {}

  absl::StatusOr<v1::GenerateResponse> Generate(const v1::GenerateRequest& request) override {
    return GenerateStreaming(request, nullptr);
  }
  absl::StatusOr<v1::GenerateResponse> GenerateStreaming(const v1::GenerateRequest& request,
                                                         const PartSink& on_part) override {
    absl::StatusOr<v1::GenerateResponse> response = inner_->Generate(request);
    if (!response.ok() || !on_part) return response;
    for (int i = 0; i < response->samples_size(); ++i) {
      v1::GenerateResponse part;
      *part.add_samples() = response->samples(i);
      on_part(part);
      if (i == 0 && response->samples_size() > 1) {
        ++waited;
        if (environment_->AwaitSteps(steps_ + 1, absl::Seconds(30))) ++overlapped;
      }
    }
    steps_ += response->samples_size();
    return response;
  }
  absl::StatusOr<v1::WeightSyncStats> SyncWeights(int64_t v) override {
    return inner_->SyncWeights(v);
  }
  int64_t policy_version() const override { return inner_->policy_version(); }

  int waited = 0;      // requests of more than one row
  int overlapped = 0;  // of those, where the first row's Step started in time

 private:
  actor::RolloutWorker* inner_;
  FakeEnvironment* environment_;
  int steps_;  // Steps the environment will have entered before the next request
};

}  // namespace trellis::loop::testing

#endif  // TRELLIS_LOOP_TESTING_FAKE_ENVIRONMENT_H_
