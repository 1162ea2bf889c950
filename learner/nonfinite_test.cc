// A non-finite loss or gradient skips the optimizer step (counted in
// TrainStats.skipped_nonfinite) and, after runtime.max_nonfinite_skips in a
// row, stops the learner with an error; never an abort.

#include <cmath>
#include <limits>
#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "learner/local_learner.h"

namespace trellis::learner {
namespace {

using ::testing::HasSubstr;

constexpr int kNonfiniteVocab = 12;

v1::JobConfig Job(int max_skips) {
  v1::JobConfig job;
  v1::ModelConfig* m = job.mutable_model();
  m->set_d_model(16);
  m->set_n_layers(1);
  m->set_n_heads(2);
  m->set_n_kv_heads(1);
  m->set_d_ff(32);
  m->set_max_seq_len(12);
  job.mutable_grpo()->set_kl_coef(0);
  job.mutable_runtime()->set_max_nonfinite_skips(max_skips);
  return job;
}

// Four samples; the first's advantage is `first_advantage`.
v1::TrainBatch Batch(float first_advantage) {
  v1::TrainBatch batch;
  for (int i = 0; i < 4; ++i) {
    v1::TrainSample* s = batch.add_samples();
    for (int t : {1, 3 + i, 5}) s->add_prompt_tokens(t);
    for (int t : {6, 7 + i % 3}) {
      s->add_response_tokens(t);
      s->add_old_logprobs(-2.5f);
      s->add_ref_logprobs(-2.5f);
    }
    s->set_advantage(i == 0 ? first_advantage : (i % 2 == 0 ? 0.5f : -0.5f));
  }
  return batch;
}

std::unique_ptr<LearnerWorker> MakeLearner(const v1::JobConfig& job) {
  LocalLearnerOptions options;
  options.vocab_size = kNonfiniteVocab;
  options.seed = 3;
  auto learner = NewLocalLearner(job, options, /*transport=*/nullptr, /*ledger=*/nullptr);
  EXPECT_TRUE(learner.ok()) << learner.status();
  return *std::move(learner);
}

TEST(NonFiniteUpdate, IsSkippedAndLeavesTheWeightsAndOptimizerAsTheyWere) {
  const v1::JobConfig job = Job(5);
  std::unique_ptr<LearnerWorker> skipped = MakeLearner(job);
  std::unique_ptr<LearnerWorker> straight = MakeLearner(job);
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    absl::StatusOr<v1::TrainStats> s = skipped->TrainStep(Batch(bad));
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_TRUE(s->skipped_nonfinite());
    EXPECT_FALSE(std::isfinite(s->loss()) && std::isfinite(s->grad_norm()));
  }
  // The next finite update is the one a learner that never saw them takes.
  absl::StatusOr<v1::TrainStats> a = skipped->TrainStep(Batch(1.0f));
  absl::StatusOr<v1::TrainStats> b = straight->TrainStep(Batch(1.0f));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_FALSE(a->skipped_nonfinite());
  EXPECT_EQ(a->loss(), b->loss());
  EXPECT_EQ(a->grad_norm(), b->grad_norm());
  a = skipped->TrainStep(Batch(1.0f));
  b = straight->TrainStep(Batch(1.0f));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->loss(), b->loss()) << "the second finite update differs: a step was taken";
}

TEST(NonFiniteUpdate, StopsAfterTheConfiguredNumberInARow) {
  std::unique_ptr<LearnerWorker> learner = MakeLearner(Job(3));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(learner->TrainStep(Batch(nan)).ok()) << i;
  // A finite update starts the count again.
  ASSERT_TRUE(learner->TrainStep(Batch(1.0f)).ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(learner->TrainStep(Batch(nan)).ok()) << i;
  absl::Status s = learner->TrainStep(Batch(nan)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("3 updates in a row had a non-finite loss or gradient"));
  EXPECT_THAT(s.message(), HasSubstr("runtime.max_nonfinite_skips (3)"));
}

}  // namespace
}  // namespace trellis::learner
