// The driver's rollout evaluations: the held-out prompts generated
// greedily and verified (or run as episodes), with retries of the items
// whose verification failed; an evaluation that leaves items unscored is
// incomplete and has no accuracy. Every item's prompt, response and
// verdict go to RUN/eval/<label>.jsonl (loop/eval_answers.h).

#include <algorithm>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "config/worker_id.h"
#include "loop/driver.h"
#include "loop/episode_runner.h"
#include "loop/eval_answers.h"
#include "loop/loop_util.h"
#include "loop/reward_rule.h"

namespace trellis::loop {

using ledger::Stage;

absl::StatusOr<ledger::EvalMetrics> Driver::EvaluateRollouts(const std::string& label) {
  // Beside the rollout pipeline: on the newest weights, between two of its
  // rollouts.
  absl::MutexLock actor_lock(&actor_mu_);
  if (absl::Status s = LoadWeights(); !s.ok()) return At(s, "eval " + label + ": weight sync");
  auto span = ledger_->Begin(Stage::kEval, config::WorkerId(v1::SCHEDULER).ToString());
  const auto& eval = data_.eval;
  const int64_t n = job_.eval().num_prompts() > 0
                        ? std::min<int64_t>(job_.eval().num_prompts(), eval.size())
                        : static_cast<int64_t>(eval.size());
  ledger::EvalMetrics metrics;
  double reward_sum = 0;
  int64_t correct = 0;
  int64_t unscored = 0;
  std::vector<EvalAnswer> answers;
  for (int64_t begin = 0; begin < n; begin += job_.eval().batch_size()) {
    const int64_t end = std::min<int64_t>(n, begin + job_.eval().batch_size());
    v1::GenerateRequest request;
    request.set_responses_per_prompt(1);
    *request.mutable_sampling() = TrainSampling(job_);
    request.mutable_sampling()->set_greedy(true);
    for (int64_t i = begin; i < end; ++i) {
      absl::StatusOr<v1::Prompt> prompt = format_->MakePrompt(eval[i]);
      if (!prompt.ok()) return prompt.status();
      *request.add_prompts() = *std::move(prompt);
    }
    std::vector<std::string> responses;
    absl::StatusOr<v1::VerifyResponse> verdicts =
        EvaluateBatch(request, begin, end, label, &metrics, &responses);
    if (!verdicts.ok()) return verdicts.status();
    eval_rewards_clipped_ += ApplyRewardRule(job_.verifier(), &*verdicts).clipped;
    for (int k = 0; k < verdicts->results_size(); ++k) {
      const v1::VerifyResult& r = verdicts->results(k);
      const v1::Prompt& prompt = request.prompts(k);
      answers.push_back({prompt.id(), prompt.text(), responses[k], prompt.answer(), r});
      if (!Scored(r)) {
        ++unscored;
        continue;
      }
      reward_sum += r.reward();
      correct += r.verdict() == v1::CORRECT;
    }
  }
  if (absl::Status s = WriteEvalAnswers(ledger_->env(), out_dir_, label, answers); !s.ok()) {
    return At(s, "eval " + label + ": answers");
  }
  metrics.prompts = n;
  metrics.unscored = unscored;
  // An incomplete evaluation has no accuracy: the items scored (those
  // verified before the verifier failed, or answered from its cache) are
  // not the held-out set, so no number stands for it.
  if (unscored == 0 && n > 0) {
    metrics.accuracy = static_cast<double>(correct) / n;
    metrics.mean_reward = reward_sum / n;
  }
  ledger_->RecordEval(label, metrics);
  Print(unscored == 0
            ? absl::StrFormat("eval %-6s  accuracy %.3f  (%d held-out prompts, greedy)\n", label,
                              metrics.accuracy, n)
            : absl::StrFormat("eval %-6s  INCOMPLETE: %d of %d held-out prompts not scored (the "
                              "verifier failed on them); no accuracy\n",
                              label, unscored, n));
  return metrics;
}

absl::StatusOr<v1::VerifyResponse> Driver::EvaluateBatch(const v1::GenerateRequest& request,
                                                         int64_t begin, int64_t end,
                                                         const std::string& label,
                                                         ledger::EvalMetrics* metrics,
                                                         std::vector<std::string>* responses) {
  const auto& eval = data_.eval;
  if (!job_.environment().name().empty()) {
    std::vector<const data::Example*> examples;
    for (int64_t i = begin; i < end; ++i) examples.push_back(&eval[i]);
    absl::StatusOr<EpisodeResults> episodes = RunEpisodes(request, examples);
    if (!episodes.ok()) return At(episodes.status(), "eval " + label + ": episodes");
    ledger_->RecordFlops(Stage::kEval, episodes->rollout.forward_flops());
    for (const v1::Sample& s : episodes->rollout.samples()) responses->push_back(s.response_text());
    return EpisodeVerdicts(*episodes);
  }
  absl::StatusOr<v1::GenerateResponse> out = roles_.actor->Generate(request);
  if (!out.ok()) return At(out.status(), "eval " + label + ": rollout");
  ledger_->RecordFlops(Stage::kEval, out->forward_flops());
  v1::VerifyRequest verify;
  for (int64_t i = begin; i < end; ++i) {
    auto* item = verify.add_items();
    item->set_prompt(eval[i].prompt);
    item->set_response(out->samples(i - begin).response_text());
    item->set_answer(eval[i].answer);
    responses->push_back(item->response());
  }
  return VerifyHeldOut(verify, label, &metrics->verify_retries);
}

absl::StatusOr<v1::VerifyResponse> Driver::VerifyHeldOut(const v1::VerifyRequest& request,
                                                         const std::string& label,
                                                         int64_t* retried) {
  absl::StatusOr<v1::VerifyResponse> verdicts = roles_.verifier->Verify(request);
  if (!verdicts.ok()) return At(verdicts.status(), "eval " + label + ": verify");
  for (const v1::VerifierStats& s : verdicts->stats()) ledger_->RecordVerifier(s);
  for (int attempt = 0; attempt < job_.eval().verify_retries(); ++attempt) {
    std::vector<int> failed;
    bool refused = false;  // by the breaker: wait for its pause
    for (int i = 0; i < verdicts->results_size(); ++i) {
      const v1::VerifyResult& r = verdicts->results(i);
      if (Scored(r)) continue;
      failed.push_back(i);
      refused = refused || r.failure() == v1::VerifyResult::CIRCUIT_OPEN;
    }
    if (failed.empty()) break;
    if (refused) ledger_->env()->SleepFor(absl::Milliseconds(job_.verifier().breaker_pause_ms()));
    v1::VerifyRequest again;
    for (int i : failed) *again.add_items() = request.items(i);
    absl::StatusOr<v1::VerifyResponse> more = roles_.verifier->Verify(again);
    if (!more.ok()) return At(more.status(), "eval " + label + ": verify again");
    if (more->results_size() != static_cast<int>(failed.size())) {
      return absl::InternalError(absl::StrCat("eval ", label, ": the verifier answered ",
                                              more->results_size(), " results for ", failed.size(),
                                              " items"));
    }
    for (const v1::VerifierStats& s : more->stats()) ledger_->RecordVerifier(s);
    *retried += static_cast<int64_t>(failed.size());
    for (size_t k = 0; k < failed.size(); ++k) {
      *verdicts->mutable_results(failed[k]) = std::move(*more->mutable_results(k));
    }
  }
  return verdicts;
}

void Driver::AnnounceClipping() const {
  int64_t clipped = eval_rewards_clipped_;
  for (const ledger::StepMetrics& m : history_) clipped += m.counts.samples_reward_clipped;
  if (clipped == 0) return;
  std::cerr << absl::StrFormat(
      "verifier: %d rewards beyond verifier.max_abs_reward (%g) were clipped to it in this run "
      "(samples_reward_clipped in ledger.jsonl)\n",
      clipped, job_.verifier().max_abs_reward());
}

}  // namespace trellis::loop
