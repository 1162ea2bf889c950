#include "loop/internal/episodes.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "loop/loop_util.h"

namespace trellis::loop::internal {

Episodes::Episodes(const v1::JobConfig& job, environment::Environment* environment,
                   const text::Tokenizer* tokenizer, const Clock& now)
    : config_(job.environment()),
      environment_(environment),
      tokenizer_(tokenizer),
      now_(now),
      limit_(config_.max_tokens() > 0 ? config_.max_tokens() : job.model().max_seq_len()),
      workers_(std::max(1, std::min(config_.workers(), environment->MaxConcurrency()))) {}

void Episodes::Open(Episode& e) {
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

void Episodes::Step(Episode& e) {
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

void Episodes::Close(Episode& e) {
  v1::CloseEpisodeRequest request;
  request.set_episode_id(e.id);
  const absl::Time start = now_();
  const absl::Status closed = environment_->Close(request);
  Count(start, closed);
}

void Episodes::Act(Episode& e, const v1::Sample& turn) {
  for (int k = 0; k < turn.response_tokens_size(); ++k) {
    e.sequence.push_back(turn.response_tokens(k));
    e.sample.add_response_tokens(turn.response_tokens(k));
    e.sample.add_logprobs(turn.logprobs(k));
    e.sample.add_trained(true);
  }
  e.sample.set_policy_version(turn.policy_version());
  e.sample.set_stop_index(turn.stop_index());
  {
    absl::MutexLock lock(&mu_);
    stats_.set_policy_tokens(stats_.policy_tokens() + turn.response_tokens_size());
  }
  if (turn.stop_index() > 0) {
    e.action = turn.response_text();
  } else {
    e.end = turn.truncated() ? v1::MAX_TOKENS : v1::POLICY_STOPPED;
  }
}

void Episodes::CountUnoverlapped(double seconds) {
  absl::MutexLock lock(&mu_);
  stats_.set_unoverlapped_wait_seconds(stats_.unoverlapped_wait_seconds() + seconds);
}

v1::EnvironmentStats Episodes::Stats() {
  v1::EnvironmentStats stats;
  {
    absl::MutexLock lock(&mu_);
    stats = stats_;
  }
  stats.set_environment(config_.version().empty()
                            ? config_.name()
                            : absl::StrCat(config_.name(), "@", config_.version()));
  stats.set_episodes(static_cast<int64_t>(episodes_.size()));
  for (const Episode& e : episodes_) {
    stats.set_turns(stats.turns() + e.sample.turns());
    stats.set_max_turns(std::max<int64_t>(stats.max_turns(), e.sample.turns()));
    (*stats.mutable_ended_by())[absl::AsciiStrToLower(v1::EpisodeEnd_Name(e.end))] += 1;
  }
  return stats;
}

absl::Status Episodes::format_error() {
  absl::MutexLock lock(&mu_);
  return format_error_;
}

template <typename Fn>
auto Episodes::Call(Episode& e, Fn fn) -> decltype(fn()) {
  const absl::Time start = now_();
  auto result = fn();
  Count(start, result.status());
  if (!result.ok()) e.end = v1::ENVIRONMENT_FAILED;
  return result;
}

void Episodes::Count(absl::Time start, const absl::Status& status) {
  const double waited = absl::ToDoubleSeconds(now_() - start);
  absl::MutexLock lock(&mu_);
  stats_.set_wait_seconds(stats_.wait_seconds() + waited);
  if (status.ok()) return;
  (*stats_.mutable_errors_by_reason())[environment::FailureReason(status)] += 1;
  if (status.code() == absl::StatusCode::kDeadlineExceeded) {
    stats_.set_timeouts(stats_.timeouts() + 1);
  }
}

void Episodes::Observe(Episode& e, const absl::StatusOr<TurnFormat::Rendered>& rendered) {
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

}  // namespace trellis::loop::internal
