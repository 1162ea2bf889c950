#ifndef TRELLIS_LOOP_TESTING_FAKE_ROLES_H_
#define TRELLIS_LOOP_TESTING_FAKE_ROLES_H_

// In-process fakes of the role interfaces (actor, verifier, learner,
// reference) for the loop's tests: no model, deterministic, and each
// records what it was asked.

#include <cstdint>
#include <string>
#include <vector>

#include "actor/rollout_worker.h"
#include "learner/learner_worker.h"
#include "loop/roles.h"
#include "reference/reference_worker.h"
#include "verifier/verifier.h"

namespace trellis::loop::testing {

// Response `index` to a prompt is its answer when index is even, else
// "wrong"; every response is two tokens long (one when `truncate_odd` cuts
// the odd ones short).
class FakeActor final : public actor::RolloutWorker {
 public:
  absl::StatusOr<v1::GenerateResponse> Generate(const v1::GenerateRequest& request) override {
    v1::GenerateResponse out;
    for (const v1::Prompt& p : request.prompts()) {
      for (int i = 0; i < request.responses_per_prompt(); ++i) {
        v1::Sample* s = out.add_samples();
        s->set_prompt_id(p.id());
        s->set_index(i);
        *s->mutable_prompt_tokens() = p.token_ids();
        const bool odd = i % 2 == 1;
        s->set_response_text(odd ? "wrong" : p.answer());
        s->set_truncated(odd && truncate_odd);
        for (int t = 0; t < (odd && truncate_odd ? 1 : 2); ++t) {
          s->add_response_tokens(7 + t);
          s->add_logprobs(-0.5f);
        }
        s->set_policy_version(version_);
        out.set_generated_tokens(out.generated_tokens() + s->response_tokens_size());
      }
    }
    ++requests;
    return out;
  }
  absl::StatusOr<v1::WeightSyncStats> SyncWeights(int64_t version) override {
    version_ = version;
    return v1::WeightSyncStats();
  }
  int64_t policy_version() const override { return version_; }

  bool truncate_odd = false;
  int requests = 0;

 private:
  int64_t version_ = 0;
};

// CORRECT (reward 1) when the response equals the answer, else WRONG
// (reward 0); TIMEOUT for a response "wrong" when `time_out_wrong`. From
// call `fail_from_call` on (0-based; -1: never), every item whose prompt
// is `fail_prompt` is ERROR: a verifier that died, whose pool still answers
// the items its cache holds.
class FakeVerifier final : public verifier::VerifierClient {
 public:
  absl::StatusOr<v1::VerifyResponse> Verify(const v1::VerifyRequest& request) override {
    const bool dead = fail_from_call >= 0 && calls++ >= fail_from_call;
    v1::VerifyResponse out;
    for (const v1::VerifyItem& item : request.items()) {
      v1::VerifyResult* r = out.add_results();
      if (dead && item.prompt() == fail_prompt) {
        r->set_verdict(v1::ERROR);
        r->set_failure(v1::VerifyResult::CALL_FAILED);
        continue;
      }
      const bool right = item.response() == item.answer();
      r->set_verdict(right ? v1::CORRECT : time_out_wrong ? v1::TIMEOUT : v1::WRONG);
      r->set_reward(right ? correct_reward : wrong_reward);
    }
    return out;
  }
  bool time_out_wrong = false;
  float correct_reward = 1;
  float wrong_reward = 0;
  int fail_from_call = -1;
  std::string fail_prompt;
  int calls = 0;
};

// Records every batch; each update is a new policy version.
class FakeLearner final : public learner::LearnerWorker {
 public:
  absl::StatusOr<v1::TrainStats> SftStep(const v1::SftBatch& batch) override {
    sft_batches.push_back(batch);
    return Update();
  }
  absl::StatusOr<v1::TrainStats> TrainStep(const v1::TrainBatch& batch) override {
    train_batches.push_back(batch);
    return Update();
  }
  absl::StatusOr<v1::TrainStats> PreferenceStep(const v1::PreferenceBatch& batch) override {
    preference_batches.push_back(batch);
    return Update();
  }
  absl::StatusOr<v1::WeightSyncStats> PublishWeights() override {
    v1::WeightSyncStats stats;
    stats.set_version(version_);
    ++publishes;
    return stats;
  }
  absl::Status SaveWeights(const std::string& path) override {
    saved.push_back(path);
    return absl::OkStatus();
  }
  absl::Status SaveCheckpoint(const std::string& dir) override { return absl::OkStatus(); }
  absl::Status RestoreCheckpoint(const std::string& dir) override { return absl::OkStatus(); }
  int64_t policy_version() const override { return version_; }
  absl::StatusOr<v1::TrainStats> EvalSft(const v1::SftBatch& batch) override {
    v1::TrainStats stats;
    stats.set_loss(1);
    stats.set_trained_tokens(batch.pairs_size());
    return stats;
  }
  absl::StatusOr<v1::TrainStats> EvalPreference(const v1::PreferenceBatch& batch) override {
    v1::TrainStats stats;
    stats.set_loss(1);
    stats.set_preference_accuracy(0.5);
    return stats;
  }

  std::vector<v1::SftBatch> sft_batches;
  std::vector<v1::TrainBatch> train_batches;
  std::vector<v1::PreferenceBatch> preference_batches;
  std::vector<std::string> saved;
  int publishes = 0;
  // Every update reports itself skipped for a non-finite loss.
  bool skip_nonfinite = false;

 private:
  absl::StatusOr<v1::TrainStats> Update() {
    ++version_;
    v1::TrainStats stats;
    stats.set_loss(0.25);
    stats.set_skipped_nonfinite(skip_nonfinite);
    return stats;
  }
  int64_t version_ = 0;
};

// Log-prob -1 for every response token; a score of 2 for every sample.
class FakeReference final : public reference::ReferenceWorker {
 public:
  absl::StatusOr<v1::LogProbResponse> LogProbs(const v1::LogProbRequest& request) override {
    v1::LogProbResponse out;
    for (const v1::Sample& s : request.samples()) {
      v1::TokenLogProbs* row = out.add_sequences();
      for (int i = 0; i < s.response_tokens_size(); ++i) row->add_logprobs(-1);
    }
    ++calls;
    return out;
  }
  absl::Status Load(const std::string& weights_path) override {
    loaded.push_back(weights_path);
    return absl::OkStatus();
  }
  absl::StatusOr<v1::ScoreResponse> Scores(const v1::LogProbRequest& request) override {
    v1::ScoreResponse out;
    for (int i = 0; i < request.samples_size(); ++i) out.add_scores(2);
    return out;
  }

  int calls = 0;
  std::vector<std::string> loaded;
};

// One of each fake, bound as Roles.
struct FakeRoles {
  FakeActor actor;
  FakeVerifier verifier;
  FakeLearner learner;
  FakeReference reference;
  Roles roles() { return Roles{&actor, &learner, &reference, &verifier}; }
};

}  // namespace trellis::loop::testing

#endif  // TRELLIS_LOOP_TESTING_FAKE_ROLES_H_
