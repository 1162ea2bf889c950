#include "loop/batch.h"

#include <algorithm>

namespace trellis::loop {

bool DropsTimeouts(const v1::JobConfig& job) {
  return job.verifier().timeout_policy() == v1::VerifierConfig::DROP;
}

std::vector<bool> DroppedSamples(const v1::VerifyResponse& verdicts, bool drop_timeouts) {
  std::vector<bool> dropped(verdicts.results_size(), false);
  if (!drop_timeouts) return dropped;
  for (int i = 0; i < verdicts.results_size(); ++i) {
    dropped[i] = verdicts.results(i).verdict() == v1::TIMEOUT;
  }
  return dropped;
}

void CountNoGradient(v1::Verdict verdict, ledger::StepCounts* counts) {
  if (verdict == v1::ERROR) {
    ++counts->samples_error;
  } else if (verdict == v1::TIMEOUT) {
    ++counts->samples_timeout;
  } else {
    ++counts->samples_zero_variance;
  }
}

namespace {

// Counts the sample's first loss: a verifier that failed on it or a group
// with no gradient (CountNoGradient), a truncated response, an unparseable
// answer.
void CountLoss(bool zero_variance, bool truncated, v1::Verdict verdict,
               ledger::StepCounts* counts) {
  if (zero_variance || verdict == v1::ERROR || verdict == v1::TIMEOUT) {
    CountNoGradient(verdict, counts);
  } else if (truncated) {
    ++counts->samples_truncated;
  } else if (verdict == v1::UNPARSEABLE) {
    ++counts->samples_unparseable;
  }
}

}  // namespace

void CountStaleness(int64_t learner_version, const v1::Sample& sample,
                    ledger::StepCounts* counts) {
  const auto staleness =
      static_cast<size_t>(std::max<int64_t>(0, learner_version - sample.policy_version()));
  if (counts->staleness.size() <= staleness) counts->staleness.resize(staleness + 1);
  ++counts->staleness[staleness];
  std::vector<int64_t>& tokens = counts->token_staleness;
  auto add = [&](int64_t version, int64_t n) {
    const auto lag = static_cast<size_t>(std::max<int64_t>(0, learner_version - version));
    if (tokens.size() <= lag) tokens.resize(lag + 1);
    tokens[lag] += n;
  };
  if (sample.token_versions_size() == 0) {
    add(sample.policy_version(), sample.response_tokens_size());
    return;
  }
  for (int64_t version : sample.token_versions()) add(version, 1);
}

v1::TrainBatch AssembleBatch(const BatchInput& in, ledger::StepCounts* counts) {
  const auto& samples = *in.samples;
  const int n = samples.size();
  double reward_sum = 0;
  int64_t correct = 0;
  int64_t kept = 0;
  for (int i = 0; i < n; ++i) {
    if (in.dropped[i]) continue;
    ++kept;
    reward_sum += in.rewards[i];
    correct += in.verdicts->results(i).verdict() == v1::CORRECT;
  }
  counts->mean_reward = kept == 0 ? 0 : reward_sum / kept;
  counts->accuracy = kept == 0 ? 0 : static_cast<double>(correct) / kept;

  v1::TrainBatch batch;
  for (int i = 0; i < n; ++i) {
    const v1::Sample& s = samples[i];
    if (in.dropped[i]) {
      ++counts->samples_dropped;
      continue;
    }
    const bool zero_variance =
        in.advantages != nullptr && in.advantages->zero_variance[i / in.group];
    CountLoss(zero_variance, s.truncated(), in.verdicts->results(i).verdict(), counts);
    if (s.truncated() && in.overlong_filtering) {
      ++counts->samples_overlong;
      continue;
    }
    // Without the estimator's advantages, or with a teacher, every
    // response trains (the learner gives each token an advantage).
    const bool carries_gradient = in.advantages == nullptr || in.teacher != nullptr
                                      ? !s.response_tokens().empty()
                                      : in.advantages->advantages[i] != 0.0f;
    counts->samples_effective += carries_gradient;
    if (s.response_tokens().empty()) continue;
    CountStaleness(in.learner_version, s, counts);
    if (counts->prompt_ids.empty() || counts->prompt_ids.back() != s.prompt_id()) {
      counts->prompt_ids.push_back(s.prompt_id());
    }
    v1::TrainSample* t = batch.add_samples();
    *t->mutable_prompt_tokens() = s.prompt_tokens();
    *t->mutable_response_tokens() = s.response_tokens();
    *t->mutable_old_logprobs() = s.logprobs();
    *t->mutable_trained() = s.trained();
    if (s.has_routing()) *t->mutable_routing() = s.routing();
    if (in.reference != nullptr) *t->mutable_ref_logprobs() = in.reference->sequences(i).logprobs();
    if (in.teacher != nullptr) *t->mutable_teacher_logprobs() = in.teacher->sequences(i).logprobs();
    t->set_reward(in.rewards[i]);
    if (in.advantages != nullptr) t->set_advantage(in.advantages->advantages[i]);
  }
  return batch;
}

}  // namespace trellis::loop
