#include "loop/episode_runner.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "loop/internal/episodes.h"
#include "loop/internal/task_pool.h"
#include "loop/loop_util.h"
#include "loop/turn_format.h"

namespace trellis::loop {
namespace {

using internal::Episode;
using internal::Episodes;
using internal::TaskPool;

// The episodes `keep` accepts.
std::vector<Episode*> Select(std::vector<Episode>& episodes, bool (*keep)(const Episode&)) {
  std::vector<Episode*> selected;
  for (Episode& e : episodes) {
    if (keep(e)) selected.push_back(&e);
  }
  return selected;
}

bool IsLive(const Episode& e) { return e.live(); }

// One round's policy turns: every live episode's next turn from the actor,
// one streaming request per turn budget (a row's draws do not depend on
// what else its request holds); the episodes past their deadline or token
// limit end instead. Each turn goes to its episode as soon as the actor
// hands it over, and the episode's Step starts on `steps` while the actor
// goes on with the others. False when no episode was live. Adds the
// actor's counts to *rollout. The caller waits for `steps`.
absl::StatusOr<bool> TakeTurns(const v1::JobConfig& job, actor::RolloutWorker& actor,
                               const EpisodeRunner::Clock& now, const v1::GenerateRequest& request,
                               const std::vector<int32_t>& stop, int turn, Episodes& run,
                               TaskPool& steps, v1::GenerateResponse* rollout) {
  const v1::EnvironmentConfig& config = job.environment();
  const int64_t turn_tokens =
      config.max_turn_tokens() > 0 ? config.max_turn_tokens() : request.sampling().max_new_tokens();
  std::map<int64_t, std::vector<Episode*>> by_budget;
  for (Episode* e : Select(run.all(), IsLive)) {
    if (now() - e->start >= absl::Milliseconds(config.episode_deadline_ms())) {
      e->end = v1::EPISODE_DEADLINE;
      continue;
    }
    const int64_t budget =
        std::min(turn_tokens, run.limit() - static_cast<int64_t>(e->sequence.size()));
    if (budget < 1) {
      e->end = v1::MAX_TOKENS;
      continue;
    }
    by_budget[budget].push_back(e);
  }
  for (const auto& [budget, episodes] : by_budget) {
    v1::GenerateRequest round;
    round.set_responses_per_prompt(1);
    round.set_seed(MixSeed(request.seed(), static_cast<uint64_t>(turn)));
    *round.mutable_sampling() = request.sampling();
    round.mutable_sampling()->set_max_new_tokens(static_cast<int32_t>(budget));
    round.mutable_sampling()->add_stop()->mutable_token_ids()->Add(stop.begin(), stop.end());
    std::map<uint64_t, Episode*> by_key;
    for (Episode* e : episodes) {
      v1::Prompt* prompt = round.add_prompts();
      prompt->set_id(e->key);
      prompt->mutable_token_ids()->Add(e->sequence.begin(), e->sequence.end());
      by_key[e->key] = e;
    }
    absl::Mutex mu;
    std::set<uint64_t> answered;
    absl::Status unasked;
    // A row the actor answered: its episode acts, then steps (once per row,
    // whether the row came in a part or only in the final response).
    const auto answer = [&](const v1::Sample& sample) {  // under mu
      auto it = by_key.find(sample.prompt_id());
      if (it == by_key.end()) {
        unasked = absl::InternalError(absl::StrCat("turn ", turn, ": the actor answered row ",
                                                   sample.prompt_id(), " it was not asked for"));
        return;
      }
      if (!answered.insert(sample.prompt_id()).second) return;
      Episode* e = it->second;
      run.Act(*e, sample);
      if (e->live()) steps.Schedule([&run, e] { run.Step(*e); });
    };
    absl::StatusOr<v1::GenerateResponse> generated =
        actor.GenerateStreaming(round, [&](const v1::GenerateResponse& part) {
          absl::MutexLock lock(&mu);
          for (const v1::Sample& sample : part.samples()) answer(sample);
        });
    if (!generated.ok()) return At(generated.status(), absl::StrCat("turn ", turn));
    absl::MutexLock lock(&mu);
    for (const v1::Sample& sample : generated->samples()) answer(sample);
    if (!unasked.ok()) return unasked;
    rollout->set_generated_tokens(rollout->generated_tokens() + generated->generated_tokens());
    rollout->set_prefill_tokens(rollout->prefill_tokens() + generated->prefill_tokens());
    rollout->set_forward_flops(rollout->forward_flops() + generated->forward_flops());
    rollout->set_kv_cache_bytes(std::max(rollout->kv_cache_bytes(), generated->kv_cache_bytes()));
  }
  return !by_budget.empty();
}

// Waits for the environment calls scheduled on `calls` (those made with no
// generation running) and counts the time as unoverlapped.
void AwaitUnoverlapped(Episodes& run, const EpisodeRunner::Clock& now, TaskPool& calls) {
  const absl::Time start = now();
  calls.Wait();
  run.CountUnoverlapped(absl::ToDoubleSeconds(now() - start));
}

}  // namespace

EpisodeRunner::EpisodeRunner(const v1::JobConfig& job, actor::RolloutWorker* actor,
                             environment::Environment* environment, const PromptFormat* format,
                             Clock now)
    : job_(job), actor_(actor), environment_(environment), format_(format), now_(std::move(now)) {}

absl::StatusOr<EpisodeResults> EpisodeRunner::Run(
    const v1::GenerateRequest& request, const std::vector<const data::Example*>& examples) {
  const v1::EnvironmentConfig& config = job_.environment();
  const text::Tokenizer* tokenizer = &format_->tokenizer();
  absl::StatusOr<std::vector<int32_t>> stop = tokenizer->Encode(config.turn_stop());
  if (!stop.ok() || stop->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment.turn_stop \"", config.turn_stop(), "\" has no tokens",
                     stop.ok() ? "" : absl::StrCat(": ", stop.status().message())));
  }
  Episodes run(job_, environment_, tokenizer, now_);
  const int n = std::max(1, request.responses_per_prompt());
  std::map<uint64_t, uint64_t> occurrences;
  for (int p = 0; p < request.prompts_size(); ++p) {
    const v1::Prompt& prompt = request.prompts(p);
    const uint64_t occurrence = occurrences[prompt.id()]++;
    for (int r = 0; r < n; ++r) {
      Episode& e = run.all().emplace_back();
      e.id = absl::StrCat(request.seed(), "-", prompt.id(), "-", occurrence, "-", r);
      e.key = MixSeed(MixSeed(prompt.id(), occurrence), static_cast<uint64_t>(r));
      e.seed = MixSeed(request.seed(), e.key);
      e.prompt = &prompt;
      e.example = p < static_cast<int>(examples.size()) ? examples[p] : nullptr;
      absl::StatusOr<std::unique_ptr<TurnFormat>> format = NewTurnFormat(*format_, e.example);
      if (!format.ok()) return format.status();
      e.format = *std::move(format);
      e.sequence.assign(prompt.token_ids().begin(), prompt.token_ids().end());
      e.sample.set_prompt_id(prompt.id());
      e.sample.set_index(r);
      *e.sample.mutable_prompt_tokens() = prompt.token_ids();
    }
  }
  // Every environment call (Open, Step, Close) runs on `calls`, at most
  // environment.workers at once.
  EpisodeResults out;
  absl::StatusOr<bool> any_live = true;
  {
    TaskPool calls(run.workers());
    for (Episode& e : run.all()) calls.Schedule([&run, &e] { run.Open(e); });
    AwaitUnoverlapped(run, now_, calls);
    for (int turn = 0; any_live.ok() && *any_live && run.format_error().ok(); ++turn) {
      any_live = TakeTurns(job_, *actor_, now_, request, *stop, turn, run, calls, &out.rollout);
      // The Steps the generation did not overlap.
      AwaitUnoverlapped(run, now_, calls);
    }
    for (Episode* e : Select(run.all(), [](const Episode& e) { return e.opened; })) {
      calls.Schedule([&run, e] { run.Close(*e); });
    }
    AwaitUnoverlapped(run, now_, calls);
  }
  if (!any_live.ok()) return any_live.status();
  if (absl::Status s = run.format_error(); !s.ok()) return s;

  out.stats = run.Stats();
  for (Episode& e : run.all()) {
    e.sample.set_episode_end(e.end);
    e.sample.set_truncated(e.end == v1::MAX_TOKENS);
    std::vector<int32_t> response(e.sample.response_tokens().begin(),
                                  e.sample.response_tokens().end());
    e.sample.set_response_text(tokenizer->Decode(response));
    out.rewards.push_back(e.end == v1::ENVIRONMENT_FAILED ? config.failure_reward() : e.reward);
    *out.rollout.add_samples() = std::move(e.sample);
  }
  return out;
}

v1::VerifyResponse EpisodeVerdicts(const EpisodeResults& results) {
  v1::VerifyResponse out;
  for (int i = 0; i < results.rollout.samples_size(); ++i) {
    v1::VerifyResult* r = out.add_results();
    r->set_reward(results.rewards[i]);
    r->set_verifier(results.stats.environment());
    if (results.rollout.samples(i).episode_end() == v1::ENVIRONMENT_FAILED) {
      r->set_verdict(v1::ERROR);
      r->set_failure(v1::VerifyResult::CALL_FAILED);
      r->set_detail("the environment failed");
    } else {
      r->set_verdict(results.rewards[i] > 0 ? v1::CORRECT : v1::WRONG);
    }
  }
  return out;
}

void AddEnvironmentStats(const v1::EnvironmentStats& from, v1::EnvironmentStats* into) {
  into->set_environment(from.environment());
  into->set_episodes(into->episodes() + from.episodes());
  into->set_turns(into->turns() + from.turns());
  into->set_max_turns(std::max(into->max_turns(), from.max_turns()));
  into->set_policy_tokens(into->policy_tokens() + from.policy_tokens());
  into->set_environment_tokens(into->environment_tokens() + from.environment_tokens());
  into->set_wait_seconds(into->wait_seconds() + from.wait_seconds());
  into->set_unoverlapped_wait_seconds(into->unoverlapped_wait_seconds() +
                                      from.unoverlapped_wait_seconds());
  for (const auto& [end, n] : from.ended_by()) (*into->mutable_ended_by())[end] += n;
  for (const auto& [reason, n] : from.errors_by_reason()) {
    (*into->mutable_errors_by_reason())[reason] += n;
  }
  into->set_timeouts(into->timeouts() + from.timeouts());
}

}  // namespace trellis::loop
