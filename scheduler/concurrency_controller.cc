#include "scheduler/concurrency_controller.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace trellis::scheduler {
namespace {

absl::Status Bad(const char* option, const char* want, double found) {
  return absl::InvalidArgumentError(
      absl::StrCat("concurrency controller: ", option, " must be ", want, ", found ", found));
}

}  // namespace

absl::Status ValidateConcurrencyOptions(const ConcurrencyOptions& o) {
  if (o.initial < 1) return Bad("initial", ">= 1", static_cast<double>(o.initial));
  if (!(o.growth > 1)) return Bad("growth", "> 1", o.growth);
  if (!(o.rise > 0 && o.rise < 1)) return Bad("rise", "in (0, 1)", o.rise);
  if (o.reprobe_every < 1) {
    return Bad("reprobe_every", ">= 1", static_cast<double>(o.reprobe_every));
  }
  if (!(o.smoothing > 0 && o.smoothing <= 1)) return Bad("smoothing", "in (0, 1]", o.smoothing);
  return absl::OkStatus();
}

ConcurrencyController::ConcurrencyController(const ConcurrencyOptions& options)
    : options_(options), budget_(options.initial) {}

int64_t ConcurrencyController::Budget(int64_t rows) const {
  return std::clamp<int64_t>(budget_, 1, std::max<int64_t>(1, rows));
}

int64_t ConcurrencyController::Up(int64_t budget) const {
  return std::max(budget + 1, static_cast<int64_t>(std::ceil(budget * options_.growth)));
}

int64_t ConcurrencyController::Down(int64_t budget) const {
  return std::max<int64_t>(
      1, std::min(budget - 1, static_cast<int64_t>(std::floor(budget / options_.growth))));
}

void ConcurrencyController::Settle(int64_t budget, double rate) {
  phase_ = Phase::kSettled;
  budget_ = settled_budget_ = budget;
  settled_rate_ = rate;
  previous_budget_ = 0;
  since_probe_ = 0;
}

void ConcurrencyController::Grow(int64_t from, double rate, int64_t rows) {
  // A bound of every row is as far as a request of these rows can go.
  if (from >= rows) return Settle(from, rate);
  phase_ = Phase::kGrow;
  previous_budget_ = from;
  previous_rate_ = rate;
  budget_ = Up(from);
}

void ConcurrencyController::Observe(const ConcurrencyObservation& o) {
  if (o.rows < 1 || o.generated_tokens <= 0 || !(o.decode_seconds > 0)) return;
  // A bound of 0 (none) or beyond the rows decoded every row at once.
  const int64_t used = o.budget > 0 ? std::min(o.budget, o.rows) : o.rows;
  const double rate = static_cast<double>(o.generated_tokens) / o.decode_seconds;
  switch (phase_) {
    case Phase::kGrow:
      if (previous_budget_ > 0 && rate <= previous_rate_ * (1 + options_.rise)) {
        return Settle(previous_budget_, previous_rate_);
      }
      return Grow(used, rate, o.rows);
    case Phase::kSettled:
      settled_rate_ += options_.smoothing * (rate - settled_rate_);
      if (++since_probe_ < options_.reprobe_every) return;
      since_probe_ = 0;
      if (settled_budget_ < o.rows) {
        phase_ = Phase::kProbeUp;
        budget_ = Up(settled_budget_);
      } else if (settled_budget_ > 1) {
        phase_ = Phase::kProbeDown;
        budget_ = Down(settled_budget_);
      }
      return;
    case Phase::kProbeUp:
      if (rate > settled_rate_ * (1 + options_.rise)) return Grow(used, rate, o.rows);
      if (settled_budget_ > 1) {
        phase_ = Phase::kProbeDown;
        budget_ = Down(settled_budget_);
      } else {
        phase_ = Phase::kSettled;
        budget_ = settled_budget_;
      }
      return;
    case Phase::kProbeDown:
      // As fast with fewer rows: the knee moved down.
      if (rate >= settled_rate_ * (1 - options_.rise)) return Settle(used, rate);
      phase_ = Phase::kSettled;
      budget_ = settled_budget_;
      return;
  }
}

}  // namespace trellis::scheduler
