#ifndef TRELLIS_LEARNER_TESTING_SMALL_JOB_H_
#define TRELLIS_LEARNER_TESTING_SMALL_JOB_H_

// A small policy-gradient job, random batches for it and a local learner of
// it: what learner_test's files share.

#include <cstdint>
#include <memory>
#include <random>

#include "gtest/gtest.h"
#include "learner/local_learner.h"

namespace trellis::learner {

inline v1::JobConfig SmallJob(int micro_batch, v1::LossAggregation aggregation) {
  v1::JobConfig job;
  auto* m = job.mutable_model();
  m->set_d_model(32);
  m->set_n_layers(2);
  m->set_n_heads(4);
  m->set_n_kv_heads(2);
  m->set_d_ff(64);
  m->set_max_seq_len(16);
  job.mutable_grpo()->set_micro_batch_size(micro_batch);
  job.mutable_grpo()->set_loss_aggregation(aggregation);
  job.mutable_grpo()->set_kl_coef(0.05);
  return job;
}

constexpr int kVocab = 20;

inline v1::TrainBatch RandomBatch(int rows, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int lo, int hi) { return lo + static_cast<int>(rng() % (hi - lo + 1)); };
  v1::TrainBatch batch;
  for (int i = 0; i < rows; ++i) {
    v1::TrainSample* s = batch.add_samples();
    const int np = uniform(2, 5), nr = uniform(1, 6);
    for (int k = 0; k < np; ++k) s->add_prompt_tokens(uniform(3, kVocab - 1));
    for (int k = 0; k < nr; ++k) {
      s->add_response_tokens(uniform(3, kVocab - 1));
      s->add_old_logprobs(-3.0f + 0.1f * uniform(0, 10));
      s->add_ref_logprobs(-3.0f + 0.1f * uniform(0, 10));
    }
    s->set_advantage(0.25f * uniform(-4, 4));
  }
  return batch;
}

inline std::unique_ptr<LearnerWorker> MakeLearner(const v1::JobConfig& job) {
  LocalLearnerOptions options;
  options.vocab_size = kVocab;
  options.seed = 7;
  auto learner = NewLocalLearner(job, options, /*transport=*/nullptr, /*ledger=*/nullptr);
  EXPECT_TRUE(learner.ok()) << learner.status();
  return *std::move(learner);
}

}  // namespace trellis::learner

#endif  // TRELLIS_LEARNER_TESTING_SMALL_JOB_H_
