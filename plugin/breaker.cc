#include "plugin/breaker.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace trellis::plugin {
namespace {

// How much of a failure's detail a line quotes.
constexpr size_t kMaxDetail = 200;

std::string Quote(const std::string& detail) {
  return detail.size() <= kMaxDetail ? detail : detail.substr(0, kMaxDetail) + "...";
}

}  // namespace

Breaker::Breaker(std::string kind, std::string label, int failures_to_open, absl::Duration pause,
                 env::Env* env, std::function<void(const std::string& line)> log)
    : kind_(std::move(kind)),
      label_(std::move(label)),
      failures_to_open_(failures_to_open),
      pause_(pause),
      env_(env),
      log_(std::move(log)) {}

std::string Breaker::Admit() {
  if (failures_to_open_ <= 0) return "";
  {
    absl::MutexLock lock(&mu_);
    if (state_ != State::kOpen) return "";
    if (env_->Now() < open_until_) return open_detail_;
    state_ = State::kTrial;  // the pause is over: this call is the trial
  }
  log_(absl::StrCat(kind_, " ", label_, ": half-open: the pause is over; one trial call decides"));
  return "";
}

void Breaker::Open(const std::string& detail) {
  state_ = State::kOpen;
  open_until_ = env_->Now() + pause_;
  open_detail_ =
      absl::StrCat("circuit open: ", label_, " failed ", failures_,
                   " consecutive calls (last: ", Quote(detail), "); paused until ",
                   absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", open_until_, absl::UTCTimeZone()));
}

bool Breaker::Observe(bool failed, const std::string& detail) {
  std::string line;
  bool opened = false;
  {
    absl::MutexLock lock(&mu_);
    if (state_ == State::kOpen) return false;  // a call admitted before it opened
    if (!failed) {
      if (state_ != State::kHealthy) {
        line = absl::StrCat(kind_, " ", label_, ": recovered after ", failures_,
                            " consecutive failed calls");
      }
      state_ = State::kHealthy;
      failures_ = 0;
    } else {
      ++failures_;
      if (state_ == State::kTrial || (failures_to_open_ > 0 && failures_ >= failures_to_open_)) {
        const bool trial = state_ == State::kTrial;
        Open(detail);
        line = absl::StrCat(kind_, " ", label_, ": ", trial ? "trial call failed: " : "",
                            open_detail_);
        opened = true;
      } else if (state_ == State::kHealthy) {
        state_ = State::kFailing;
        line = absl::StrCat(kind_, " ", label_, ": failing: ", Quote(detail));
        if (failures_to_open_ > 0) {
          absl::StrAppend(&line, "; the circuit opens after ", failures_to_open_,
                          " consecutive failed calls");
        }
      }
    }
  }
  if (!line.empty()) log_(line);
  return opened;
}

}  // namespace trellis::plugin
