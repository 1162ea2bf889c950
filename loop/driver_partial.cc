// The driver's rollout round under partial rollout (loop/partial_rollout.h,
// docs/async.md).

#include <map>
#include <memory>
#include <optional>
#include <utility>

#include "absl/time/clock.h"
#include "config/worker_id.h"
#include "loop/driver.h"
#include "loop/loop_util.h"

namespace trellis::loop {

StreamMark Driver::Mark() {
  absl::MutexLock lock(&account_mu_);
  StreamMark mark;
  mark.position = train_stream_.position();
  if (partial_ != nullptr) mark.in_flight = partial_->Positions();
  return mark;
}

absl::StatusOr<std::unique_ptr<PendingRound>> Driver::StartPartialRound(int64_t step,
                                                                        int64_t group) {
  auto out = std::make_unique<PendingRound>();
  v1::GenerateRequest request;
  {
    absl::MutexLock lock(&account_mu_);
    // Step t trains at about first_version_ + t - first_step_: a token
    // older than max_staleness versions before that does not go on.
    const int64_t oldest = first_version_ + (step - first_step_) - job_.async().max_staleness();
    out->partial.groups_restarted =
        partial_->RestartOlderThan(oldest, &out->partial.tokens_discarded);
    const int64_t draw = partial_->ToDraw();
    for (int64_t i = 0; i < draw; ++i) {
      CarriedGroup drawn;
      drawn.position = train_stream_.position();
      drawn.example = &train_stream_.Next();
      absl::StatusOr<v1::Prompt> prompt = format_->MakePrompt(*drawn.example);
      if (!prompt.ok()) return prompt.status();
      drawn.prompt = *std::move(prompt);
      partial_->Add(std::move(drawn));
      ++account_.drawn;
      ++account_.in_flight;
    }
    request = partial_->Request(RoundRequest(step, 0, group));
  }
  out->start = absl::Now();
  absl::StatusOr<v1::GenerateResponse> rollout;
  std::optional<v1::GenerateResponse> finished;
  {
    absl::MutexLock lock(&account_mu_);
    finished = partial_->Finished(request);
  }
  if (finished.has_value()) {
    rollout = *std::move(finished);
  } else {
    auto span = ledger_->Begin(ledger::Stage::kRollout, config::WorkerId(v1::ACTOR).ToString());
    rollout = roles_.actor->Generate(request);
    span.End();
  }
  out->rollout_end = absl::Now();
  if (!rollout.ok()) return At(rollout.status(), "rollout");
  ledger_->RecordFlops(ledger::Stage::kRollout, rollout->forward_flops());
  PartialSplit split;
  {
    absl::MutexLock lock(&account_mu_);
    split = partial_->Split(request, *rollout);
  }
  out->partial += split.counts;
  out->examples = std::move(split.examples);
  out->rollout = std::move(split.rollout);
  // The step's groups are known once the rollout stops: they are verified
  // as one part, beside the next rollout and the update.
  std::map<uint64_t, const data::Example*> by_id;
  for (const data::Example* ex : out->examples) by_id[ex->id] = ex;
  out->verifying = std::make_unique<StreamingVerify>(roles_.verifier, ledger_, std::move(by_id));
  out->verifying->Add(out->rollout);
  return out;
}

}  // namespace trellis::loop
