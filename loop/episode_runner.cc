#include "loop/episode_runner.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "loop/loop_util.h"
#include "loop/turn_format.h"

namespace trellis::loop {
namespace {

using v1::EpisodeEnd;

struct Episode {
  std::string id;
  // Names the episode's rows in the actor's requests (a row key's prompt
  // id): the same whatever else a round's request holds.
  uint64_t key = 0;
  uint64_t seed = 0;
  const v1::Prompt* prompt = nullptr;
  const data::Example* example = nullptr;
  std::vector<int32_t> sequence;  // prompt, then the response so far
  v1::Sample sample;              // response tokens, log-probs, trained mask
  float reward = 0;
  bool opened = false;
  EpisodeEnd end = v1::EPISODE_END_UNSPECIFIED;
  absl::Time start;
  std::string action;  // the turn that waits for its Step
  std::unique_ptr<TurnFormat> format;

  bool live() const { return end == v1::EPISODE_END_UNSPECIFIED; }
};

// One Run's episodes and what their calls counted.
class Episodes {
 public:
  Episodes(const v1::JobConfig& job, environment::Environment* environment,
           const text::Tokenizer* tokenizer, const EpisodeRunner::Clock& now)
      : config_(job.environment()),
        environment_(environment),
        tokenizer_(tokenizer),
        now_(now),
        limit_(config_.max_tokens() > 0 ? config_.max_tokens() : job.model().max_seq_len()),
        workers_(std::max(1, std::min(config_.workers(), environment->MaxConcurrency()))) {}

  std::vector<Episode>& all() { return episodes_; }
  int64_t limit() const { return limit_; }

  // Runs fn on each of `episodes` concurrently (environment.workers).
  void ForEach(const std::vector<Episode*>& episodes, const std::function<void(Episode&)>& fn) {
    ForEachConcurrently(static_cast<int64_t>(episodes.size()), workers_,
                        [&](int64_t i) { fn(*episodes[i]); });
  }

  void Open(Episode& e) {
    v1::OpenEpisodeRequest request;
    request.set_episode_id(e.id);
    request.set_prompt(e.prompt->text());
    request.set_answer(e.prompt->answer());
    if (e.example != nullptr) request.set_metadata_json(e.example->metadata_json);
    request.set_seed(e.seed);
    e.start = now_();
    absl::StatusOr<v1::OpenEpisodeResponse> opened =
        Call(e, [&] { return environment_->Open(request); });
    if (!opened.ok()) return;
    e.opened = true;
    Observe(e, e.format->Open(opened->observation()));
  }

  void Step(Episode& e) {
    v1::EnvironmentStepRequest request;
    request.set_episode_id(e.id);
    request.set_action(e.action);
    request.set_turn(e.sample.turns());
    e.sample.set_turns(e.sample.turns() + 1);
    absl::StatusOr<v1::EnvironmentStepResponse> stepped =
        Call(e, [&]() -> absl::StatusOr<v1::EnvironmentStepResponse> {
          absl::StatusOr<v1::EnvironmentStepResponse> r = environment_->Step(request);
          if (r.ok() && !std::isfinite(r->reward())) {
            return absl::InvalidArgumentError(
                absl::StrCat("episode ", e.id, ": non-finite reward ", r->reward()));
          }
          return r;
        });
    if (!stepped.ok()) return;
    e.reward += stepped->reward();
    // The last observation is not appended: no turn would follow it.
    if (stepped->done()) {
      e.end = v1::DONE;
    } else if (e.sample.turns() >= config_.max_turns()) {
      e.end = v1::MAX_TURNS;
    } else {
      Observe(e, e.format->AfterTurn(e.action, stepped->observation()));
    }
  }

  void Close(Episode& e) {
    v1::CloseEpisodeRequest request;
    request.set_episode_id(e.id);
    const absl::Time start = now_();
    const absl::Status closed = environment_->Close(request);
    Count(start, closed);
  }

  // The policy's turn `turn` (a row of the actor's answer) appended; the
  // episode ends unless the turn ended on the stop.
  void Act(Episode& e, const v1::Sample& turn) {
    for (int k = 0; k < turn.response_tokens_size(); ++k) {
      e.sequence.push_back(turn.response_tokens(k));
      e.sample.add_response_tokens(turn.response_tokens(k));
      e.sample.add_logprobs(turn.logprobs(k));
      e.sample.add_trained(true);
    }
    e.sample.set_policy_version(turn.policy_version());
    e.sample.set_stop_index(turn.stop_index());
    policy_tokens_ += turn.response_tokens_size();
    if (turn.stop_index() > 0) {
      e.action = turn.response_text();
    } else {
      e.end = turn.truncated() ? v1::MAX_TOKENS : v1::POLICY_STOPPED;
    }
  }

  // Stats of every episode, after Close.
  v1::EnvironmentStats Stats() {
    v1::EnvironmentStats stats = stats_;
    stats.set_environment(config_.version().empty()
                              ? config_.name()
                              : absl::StrCat(config_.name(), "@", config_.version()));
    stats.set_episodes(static_cast<int64_t>(episodes_.size()));
    stats.set_policy_tokens(policy_tokens_);
    for (const Episode& e : episodes_) {
      stats.set_turns(stats.turns() + e.sample.turns());
      stats.set_max_turns(std::max<int64_t>(stats.max_turns(), e.sample.turns()));
      (*stats.mutable_ended_by())[absl::AsciiStrToLower(v1::EpisodeEnd_Name(e.end))] += 1;
    }
    return stats;
  }

  // The first turn-format failure (a chat template that cannot be
  // continued): it fails the Run.
  absl::Status format_error() {
    absl::MutexLock lock(&mu_);
    return format_error_;
  }

 private:
  // Makes one environment call for `e`, timed and counted; a failure ends
  // the episode.
  template <typename Fn>
  auto Call(Episode& e, Fn fn) -> decltype(fn()) {
    const absl::Time start = now_();
    auto result = fn();
    Count(start, result.status());
    if (!result.ok()) e.end = v1::ENVIRONMENT_FAILED;
    return result;
  }

  void Count(absl::Time start, const absl::Status& status) {
    const double waited = absl::ToDoubleSeconds(now_() - start);
    absl::MutexLock lock(&mu_);
    stats_.set_wait_seconds(stats_.wait_seconds() + waited);
    if (status.ok()) return;
    (*stats_.mutable_errors_by_reason())[environment::FailureReason(status)] += 1;
    if (status.code() == absl::StatusCode::kDeadlineExceeded) {
      stats_.set_timeouts(stats_.timeouts() + 1);
    }
  }

  // An observation as the episode's turn format rendered it: the prompt it
  // replaces, if any, then its text's tokens appended, untrained, as many
  // as the episode's token limit leaves (MAX_TOKENS when it cuts them). A
  // text the tokenizer cannot represent ends the episode; a format failure
  // too, and is kept for the Run.
  void Observe(Episode& e, const absl::StatusOr<TurnFormat::Rendered>& rendered) {
    if (!rendered.ok()) {
      e.end = v1::ENVIRONMENT_FAILED;
      absl::MutexLock lock(&mu_);
      if (format_error_.ok()) format_error_ = At(rendered.status(), absl::StrCat("episode ", e.id));
      return;
    }
    absl::StatusOr<std::vector<int32_t>> prompt = tokenizer_->Encode(rendered->prompt.value_or(""));
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer_->Encode(rendered->text);
    if (!prompt.ok() || !ids.ok()) {
      Count(now_(), absl::InvalidArgumentError((prompt.ok() ? ids : prompt).status().message()));
      e.end = v1::ENVIRONMENT_FAILED;
      return;
    }
    if (rendered->prompt.has_value()) {
      e.sequence = *prompt;
      *e.sample.mutable_prompt_tokens() = {prompt->begin(), prompt->end()};
    }
    const int64_t room = limit_ - static_cast<int64_t>(e.sequence.size());
    const int64_t kept = std::min<int64_t>(room, static_cast<int64_t>(ids->size()));
    for (int64_t k = 0; k < kept; ++k) {
      e.sequence.push_back((*ids)[k]);
      e.sample.add_response_tokens((*ids)[k]);
      e.sample.add_logprobs(0);
      e.sample.add_trained(false);
    }
    absl::MutexLock lock(&mu_);
    stats_.set_environment_tokens(stats_.environment_tokens() + kept);
    if (kept < static_cast<int64_t>(ids->size())) e.end = v1::MAX_TOKENS;
  }

  const v1::EnvironmentConfig& config_;
  environment::Environment* environment_;
  const text::Tokenizer* tokenizer_;
  const EpisodeRunner::Clock& now_;
  const int64_t limit_;
  const int workers_;
  std::vector<Episode> episodes_;
  int64_t policy_tokens_ = 0;
  absl::Mutex mu_;
  v1::EnvironmentStats stats_ ABSL_GUARDED_BY(mu_);
  absl::Status format_error_ ABSL_GUARDED_BY(mu_);
};

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
// one request per turn budget (a row's draws do not depend on what else
// its request holds); the episodes past their deadline or token limit end
// instead. False when no episode was live. Adds the actor's counts to
// *rollout.
absl::StatusOr<bool> TakeTurns(const v1::JobConfig& job, actor::RolloutWorker& actor,
                               const EpisodeRunner::Clock& now, const v1::GenerateRequest& request,
                               const std::vector<int32_t>& stop, int turn, Episodes& run,
                               v1::GenerateResponse* rollout) {
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
    absl::StatusOr<v1::GenerateResponse> generated = actor.Generate(round);
    if (!generated.ok()) return At(generated.status(), absl::StrCat("turn ", turn));
    for (const v1::Sample& sample : generated->samples()) {
      auto it = by_key.find(sample.prompt_id());
      if (it == by_key.end()) {
        return absl::InternalError(absl::StrCat("turn ", turn, ": the actor answered row ",
                                                sample.prompt_id(), " it was not asked for"));
      }
      run.Act(*it->second, sample);
    }
    rollout->set_generated_tokens(rollout->generated_tokens() + generated->generated_tokens());
    rollout->set_prefill_tokens(rollout->prefill_tokens() + generated->prefill_tokens());
    rollout->set_forward_flops(rollout->forward_flops() + generated->forward_flops());
    rollout->set_kv_cache_bytes(std::max(rollout->kv_cache_bytes(), generated->kv_cache_bytes()));
  }
  return !by_budget.empty();
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
  run.ForEach(Select(run.all(), [](const Episode&) { return true; }),
              [&](Episode& e) { run.Open(e); });
  EpisodeResults out;
  absl::StatusOr<bool> any_live = true;
  for (int turn = 0; any_live.ok() && *any_live && run.format_error().ok(); ++turn) {
    any_live = TakeTurns(job_, *actor_, now_, request, *stop, turn, run, &out.rollout);
    if (any_live.ok()) run.ForEach(Select(run.all(), IsLive), [&](Episode& e) { run.Step(e); });
  }
  run.ForEach(Select(run.all(), [](const Episode& e) { return e.opened; }),
              [&](Episode& e) { run.Close(e); });
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
  for (const auto& [end, n] : from.ended_by()) (*into->mutable_ended_by())[end] += n;
  for (const auto& [reason, n] : from.errors_by_reason()) {
    (*into->mutable_errors_by_reason())[reason] += n;
  }
  into->set_timeouts(into->timeouts() + from.timeouts());
}

}  // namespace trellis::loop
